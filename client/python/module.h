// Internals shared by the files of the `shelf` Python module
// (shelf_module.cc is the module itself): errors, conversions, the Status
// item type, and the PyClient every binding holds.
#ifndef SHELF_CLIENT_PYTHON_MODULE_H_
#define SHELF_CLIENT_PYTHON_MODULE_H_

#include <pybind11/pybind11.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/binding_options.h"
#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf::python {

namespace py = pybind11;

// Adds shelf.Error and its subclasses (one per status code) to `m`.
void RegisterErrors(py::module_& m);
// Raises the shelf.Error subclass of `s`.
[[noreturn]] void Raise(const Status& s);
// Raise(s) unless s is OK.
void Check(const Status& s);

// Keys are bytes; str keys are taken as their UTF-8 bytes.
std::string ToKey(py::handle key);
std::vector<std::string> ToKeys(py::handle keys);

// A contiguous buffer-protocol view, released (with the GIL) on destruction.
class BufferView {
 public:
  BufferView(py::handle obj, bool writable) {
    int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0) throw py::error_already_set();
    held_ = true;
  }
  BufferView(BufferView&& other) noexcept : view_(other.view_), held_(other.held_) {
    other.held_ = false;
  }
  BufferView(const BufferView&) = delete;
  BufferView& operator=(const BufferView&) = delete;
  ~BufferView() {
    if (held_) PyBuffer_Release(&view_);
  }
  char* data() const { return static_cast<char*>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

 private:
  Py_buffer view_{};
  bool held_ = false;
};

// `s` as Python bytes. A large value is copied with the GIL released (the
// new object is this thread's alone until returned), so threads reading
// blocks at once do not queue on the GIL for their copies. Call with the
// GIL held.
py::bytes ToBytes(const std::string& s);

// shelf.Status: the outcome of one item of a batch.
struct ItemStatus {
  Status status;
};
py::object StatusObject(const Status& s);
py::list StatusList(const std::vector<Status>& statuses);

struct PyBufferHandle {
  BufferHandle handle;
  size_t size = 0;
  bool gpu = false;
};

// An asynchronous batch. Holds the Python buffers the batch reads from or
// writes into until it is done.
class PyFuture {
 public:
  enum class Kind { kGet, kPut, kGetInto };
  PyFuture(Kind kind, BatchFuture future, std::vector<BufferView> views, py::list targets)
      : kind_(kind),
        future_(std::move(future)),
        views_(std::move(views)),
        targets_(std::move(targets)) {}
  ~PyFuture() {
    {
      py::gil_scoped_release nogil;
      future_.Wait();
    }
    views_.clear();  // with the GIL
  }

  bool Done() const { return future_.Poll(); }
  bool Wait(std::optional<double> timeout_s) {
    py::gil_scoped_release nogil;
    if (!timeout_s) {
      future_.Wait();
      return true;
    }
    double ms = *timeout_s * 1000.0;
    return future_.Wait(ms <= 0 ? 0 : static_cast<uint64_t>(ms));
  }
  py::list Statuses() {
    WaitAndCheck();
    return StatusList(future_.statuses());
  }
  // batch_get_async: list of bytes or None; batch_put_async: list of
  // Status; batch_get_into_async: list of sizes or None.
  py::object Result() {
    WaitAndCheck();
    const std::vector<Status>& st = future_.statuses();
    py::list out;
    switch (kind_) {
      case Kind::kGet: {
        std::vector<std::string>* values = future_.values();
        for (size_t i = 0; i < st.size(); ++i) {
          out.append(st[i].ok() ? py::object(ToBytes((*values)[i])) : py::none());
        }
        break;
      }
      case Kind::kPut:
        return StatusList(st);
      case Kind::kGetInto: {
        const std::vector<size_t>& sizes = future_.sizes();
        for (size_t i = 0; i < st.size(); ++i) {
          out.append(st[i].ok() ? py::object(py::int_(sizes[i])) : py::none());
        }
        break;
      }
    }
    return out;
  }

 private:
  void WaitAndCheck() {
    {
      py::gil_scoped_release nogil;
      future_.Wait();
    }
    Check(future_.status());
  }

  const Kind kind_;
  BatchFuture future_;
  std::vector<BufferView> views_;
  py::list targets_;
};

// shelf.Client. Its methods named as in Python (Put for put, ...) are bound
// by member pointer in shelf_module.cc and defined in py_client.cc.
class PyClient {
 public:
  explicit PyClient(const ClientOptions& options) {
    std::unique_ptr<Client> c;
    Check(Client::Open(options, &c));
    client_ = std::move(c);
  }
  ~PyClient() {
    if (client_ != nullptr) {
      py::gil_scoped_release nogil;
      client_.reset();
    }
  }

  // shelf.Client(masters, *, secret=..., ...): the options as keywords.
  static std::shared_ptr<PyClient> Create(
      const py::object& masters, const std::string& secret, uint64_t timeout_ms, bool allow_tcp,
      bool allow_shm, bool verify_checksums, const std::string& tls_ca, uint32_t transfer_threads,
      uint32_t async_threads, uint32_t async_queue_max, uint32_t tcp_streams_per_block,
      const std::string& rdma_device, uint32_t rdma_port, int32_t rdma_gid_index,
      uint32_t rdma_traffic_class, uint32_t rdma_service_level, uint32_t rdma_pkey_index,
      const std::string& tls_cert, const std::string& tls_key, const std::string& etcd_ca,
      const std::string& etcd_cert, const std::string& etcd_key, const std::string& etcd_user_file,
      int64_t shm_store_uid, const std::string& principal, const std::string& principal_secret,
      const std::string& credentials, bool rdma_store_pull_puts, uint32_t rdma_connections_max,
      uint32_t rdma_gpu_registrations_max, bool data_tls, const std::string& data_tls_ca,
      const std::string& data_tls_cert, const std::string& data_tls_key, bool session_tag_payload,
      uint64_t warm_shm_bytes, uint32_t master_call_streams);

  // Never null: close() ends the client but keeps the object, whose calls
  // then answer FAILED_PRECONDITION. Safe without the GIL.
  Client* get() const { return client_.get(); }

  void Close() { client_->Close(); }

  // Registered buffers keep their Python object's buffer view alive.
  PyBufferHandle Register(py::handle target, std::optional<size_t> size, bool gpu)
      ABSL_LOCKS_EXCLUDED(mu_) {
    void* base = nullptr;
    size_t bytes = 0;
    std::unique_ptr<BufferView> view;
    if (PyLong_Check(target.ptr())) {
      base = PyLong_AsVoidPtr(target.ptr());
      if (PyErr_Occurred()) throw py::error_already_set();
      if (!size) throw py::value_error("register_buffer(address) needs size=");
      bytes = *size;
    } else {
      view = std::make_unique<BufferView>(target, /*writable=*/true);
      base = view->data();
      bytes = size ? *size : view->size();
      if (bytes > view->size()) throw py::value_error("size is larger than the buffer");
    }
    BufferHandle h;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = get()->RegisterBuffer(base, bytes, &h, gpu);
    }
    Check(s);
    if (view != nullptr) {
      MutexLock lock(&mu_);
      views_.emplace(h.id, std::move(view));
    }
    return PyBufferHandle{h, bytes, gpu};
  }

  void Unregister(const PyBufferHandle& h) ABSL_LOCKS_EXCLUDED(mu_) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->UnregisterBuffer(h.handle);
    }
    Check(s);
    std::unique_ptr<BufferView> view;
    {
      MutexLock lock(&mu_);
      auto it = views_.find(h.handle.id);
      if (it != views_.end()) {
        view = std::move(it->second);
        views_.erase(it);
      }
    }
  }

  // The calls of shelf.Client; docs/client.md and the docstrings in
  // shelf_module.cc describe each.
  void Put(py::handle key, py::handle value, uint32_t replicas, bool best_effort, bool prefer_local,
           const std::string& spread_label, int64_t timeout_ms, py::handle parent_key,
           std::optional<uint64_t> engine_hash, std::optional<uint64_t> engine_parent_hash,
           uint32_t block_tokens, std::vector<uint32_t> token_ids, const std::string& model);
  py::tuple ListKeys(const py::bytes& pattern, const py::bytes& cursor, size_t count,
                     int64_t timeout_ms);
  py::object Get(py::handle key, int64_t timeout_ms);
  py::object GetInto(py::handle key, py::handle target, size_t offset,
                     std::optional<size_t> capacity, int64_t timeout_ms,
                     std::optional<uintptr_t> stream, std::optional<uintptr_t> event);
  void PutFrom(py::handle key, py::handle source, size_t offset, std::optional<size_t> size,
               uint32_t replicas, bool best_effort, bool prefer_local,
               const std::string& spread_label, int64_t timeout_ms, std::optional<uintptr_t> stream,
               std::optional<uintptr_t> event);
  py::object Exists(py::handle keys, int64_t timeout_ms);
  bool Remove(py::handle key, int64_t timeout_ms);
  py::object BatchRemove(py::handle keys, int64_t timeout_ms, bool return_statuses);
  size_t MatchPrefix(py::handle keys, int64_t timeout_ms);
  py::dict Locate(py::handle keys, int64_t timeout_ms);
  py::object BatchGet(py::handle keys, int64_t timeout_ms, bool return_statuses);
  py::object BatchGetInto(py::handle keys, py::handle targets, int64_t timeout_ms,
                          bool return_statuses);
  py::list BatchPut(py::handle keys, py::handle values, uint32_t replicas, bool best_effort,
                    bool prefer_local, const std::string& spread_label, int64_t timeout_ms,
                    py::handle blocks);
  std::unique_ptr<PyFuture> BatchGetAsync(py::handle keys, int64_t timeout_ms);
  std::unique_ptr<PyFuture> BatchPutAsync(py::handle keys, py::handle values, uint32_t replicas,
                                          int64_t timeout_ms);
  std::unique_ptr<PyFuture> BatchGetIntoAsync(py::handle keys, py::handle handle,
                                              std::vector<size_t> offsets, size_t capacity,
                                              int64_t timeout_ms, std::optional<uintptr_t> stream,
                                              std::optional<uintptr_t> event);
  py::dict Stats();

 private:
  std::unique_ptr<Client> client_;
  Mutex mu_;
  std::map<uint64_t, std::unique_ptr<BufferView>> views_ ABSL_GUARDED_BY(mu_);
};

// The bindings of the other files, called by the module in this order.
void BindKeys(py::module_& m);            // keys_binding.cc
void BindStorageAdapter(py::module_& m);  // adapter_binding.cc
void BindMooncake(py::module_& m);        // mooncake_binding.cc: shelf.mooncake
void BindLmcache(py::module_& m);         // lmcache_binding.cc: shelf.lmcache

}  // namespace shelf::python

#endif  // SHELF_CLIENT_PYTHON_MODULE_H_
