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
#include <vector>

#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf::python {

namespace py = pybind11;

// Adds shelf.Error and its subclasses (one per status code) to `m`.
void RegisterErrors(py::module_ &m);
// Raises the shelf.Error subclass of `s`.
[[noreturn]] void Raise(const Status &s);
// Raise(s) unless s is OK.
void Check(const Status &s);

// Keys are bytes; str keys are taken as their UTF-8 bytes.
std::string ToKey(py::handle key);
std::vector<std::string> ToKeys(py::handle keys);
// `timeout_ms` as the C API takes it: 0 the client's default, > 0 that long,
// < 0 a deadline that has already passed.
Deadline ToDeadline(int64_t timeout_ms);

// A contiguous buffer-protocol view, released (with the GIL) on destruction.
class BufferView {
public:
  BufferView(py::handle obj, bool writable) {
    int flags = PyBUF_ANY_CONTIGUOUS | (writable ? PyBUF_WRITABLE : 0);
    if (PyObject_GetBuffer(obj.ptr(), &view_, flags) != 0)
      throw py::error_already_set();
    held_ = true;
  }
  BufferView(BufferView &&other) noexcept
      : view_(other.view_), held_(other.held_) {
    other.held_ = false;
  }
  BufferView(const BufferView &) = delete;
  BufferView &operator=(const BufferView &) = delete;
  ~BufferView() {
    if (held_)
      PyBuffer_Release(&view_);
  }
  char *data() const { return static_cast<char *>(view_.buf); }
  size_t size() const { return static_cast<size_t>(view_.len); }

private:
  Py_buffer view_{};
  bool held_ = false;
};

inline py::bytes ToBytes(const std::string &s) {
  return py::bytes(s.data(), s.size());
}

// shelf.Status: the outcome of one item of a batch.
struct ItemStatus {
  Status status;
};
py::object StatusObject(const Status &s);
py::list StatusList(const std::vector<Status> &statuses);

struct PyBufferHandle {
  BufferHandle handle;
  size_t size = 0;
  bool gpu = false;
};

class PyClient {
public:
  explicit PyClient(const ClientOptions &options) {
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

  // Never null: close() ends the client but keeps the object, whose calls
  // then answer FAILED_PRECONDITION. Safe without the GIL.
  Client *get() const { return client_.get(); }

  void Close() { client_->Close(); }

  // Registered buffers keep their Python object's buffer view alive.
  PyBufferHandle Register(py::handle target, std::optional<size_t> size,
                          bool gpu) ABSL_LOCKS_EXCLUDED(mu_) {
    void *base = nullptr;
    size_t bytes = 0;
    std::unique_ptr<BufferView> view;
    if (PyLong_Check(target.ptr())) {
      base = PyLong_AsVoidPtr(target.ptr());
      if (PyErr_Occurred())
        throw py::error_already_set();
      if (!size)
        throw py::value_error("register_buffer(address) needs size=");
      bytes = *size;
    } else {
      view = std::make_unique<BufferView>(target, /*writable=*/true);
      base = view->data();
      bytes = size ? *size : view->size();
      if (bytes > view->size())
        throw py::value_error("size is larger than the buffer");
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

  void Unregister(const PyBufferHandle &h) ABSL_LOCKS_EXCLUDED(mu_) {
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

private:
  std::unique_ptr<Client> client_;
  Mutex mu_;
  std::map<uint64_t, std::unique_ptr<BufferView>> views_ ABSL_GUARDED_BY(mu_);
};

// The bindings of the other files, called by the module in this order.
void BindKeys(py::module_ &m);           // keys_binding.cc
void BindStorageAdapter(py::module_ &m); // adapter_binding.cc
void BindMooncake(py::module_ &m);       // mooncake_binding.cc: shelf.mooncake

} // namespace shelf::python

#endif // SHELF_CLIENT_PYTHON_MODULE_H_
