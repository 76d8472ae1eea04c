// The `shelf` Python module: libshelf for Python engines (pybind11).
//
//   import shelf
//   client = shelf.Client(["127.0.0.1:7000"])
//   client.put(b"block-0", b"bytes")
//   client.get(b"block-0")                     # b"bytes"; None on a miss
//   buf = bytearray(1 << 20)
//   n = client.get_into(b"block-0", buf)       # zero-copy into any writable buffer
//   kb = shelf.KeyBuilder(shelf.KeyNamespace(model="m", dtype="bf16",
//                                            kv_layout="paged_nhd", chunk_tokens=256))
//   keys = kb.block_keys(token_ids)            # identical to the C++ KeyBuilder
//   cache = shelf.StorageAdapter(client)       # get/set/exists/batch_* for engines
//
// Errors raise shelf.Error subclasses that carry the status code (.code) and
// also derive from the matching built-in exception (KeyError, ValueError,
// TimeoutError, ConnectionError, ...). Every call that waits on the network
// releases the GIL. docs/client.md describes each call.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstring>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/memory_batch.h"
#include "shelf/client.h"
#include "shelf/keys.h"

namespace py = pybind11;

namespace shelf {
namespace {

// ------------------------------------------------------------ exceptions

struct Exceptions {
  PyObject* base = nullptr;
  std::map<StatusCode, PyObject*> by_code;
};
Exceptions& Errors() {
  static Exceptions* e = new Exceptions();
  return *e;
}

PyObject* NewError(py::module_& m, const char* name, PyObject* base, PyObject* builtin,
                   const char* doc) {
  std::string qualified = std::string("shelf.") + name;
  py::tuple bases = builtin != nullptr ? py::make_tuple(py::handle(base), py::handle(builtin))
                                       : py::make_tuple(py::handle(base));
  PyObject* type = PyErr_NewExceptionWithDoc(qualified.c_str(), doc, bases.ptr(), /*dict=*/nullptr);
  if (type == nullptr) throw py::error_already_set();
  m.add_object(name, py::handle(type));
  return type;
}

void RegisterErrors(py::module_& m) {
  Exceptions& e = Errors();
  e.base = PyErr_NewExceptionWithDoc(
      "shelf.Error",
      "A call failed. .code is the status code (int, shelf.StatusCode), .code_name its name "
      "(\"NOT_FOUND\"), .message the text.",
      PyExc_Exception, nullptr);
  if (e.base == nullptr) throw py::error_already_set();
  m.add_object("Error", py::handle(e.base));
  struct Spec {
    StatusCode code;
    const char* name;
    PyObject* builtin;
  };
  const Spec specs[] = {
      {StatusCode::kNotFound, "NotFoundError", PyExc_KeyError},
      {StatusCode::kInvalidArgument, "InvalidArgumentError", PyExc_ValueError},
      {StatusCode::kOutOfRange, "OutOfRangeError", PyExc_ValueError},
      {StatusCode::kDeadlineExceeded, "DeadlineExceededError", PyExc_TimeoutError},
      {StatusCode::kUnavailable, "UnavailableError", PyExc_ConnectionError},
      {StatusCode::kFailedPrecondition, "FailedPreconditionError", nullptr},
      {StatusCode::kResourceExhausted, "ResourceExhaustedError", nullptr},
      {StatusCode::kDataLoss, "DataLossError", nullptr},
      {StatusCode::kUnimplemented, "UnimplementedError", PyExc_NotImplementedError},
      {StatusCode::kUnauthenticated, "UnauthenticatedError", PyExc_PermissionError},
      {StatusCode::kPermissionDenied, "PermissionDeniedError", PyExc_PermissionError},
  };
  for (const Spec& s : specs) {
    e.by_code[s.code] = NewError(m, s.name, e.base, s.builtin, StatusCodeName(s.code));
  }
}

[[noreturn]] void Raise(const Status& s) {
  Exceptions& e = Errors();
  auto it = e.by_code.find(s.code());
  PyObject* type = it != e.by_code.end() ? it->second : e.base;
  std::string text = std::string(StatusCodeName(s.code())) + ": " + s.message();
  py::object exc = py::handle(type)(py::str(text));
  exc.attr("code") = static_cast<int>(s.code());
  exc.attr("code_name") = StatusCodeName(s.code());
  exc.attr("message") = s.message();
  PyErr_SetObject(type, exc.ptr());
  throw py::error_already_set();
}

void Check(const Status& s) {
  if (!s.ok()) Raise(s);
}

// ------------------------------------------------------------ conversions

// Keys are bytes; str keys are taken as their UTF-8 bytes.
std::string ToKey(py::handle key) {
  if (PyBytes_Check(key.ptr())) return std::string(py::reinterpret_borrow<py::bytes>(key));
  if (PyUnicode_Check(key.ptr())) {
    Py_ssize_t n = 0;
    const char* p = PyUnicode_AsUTF8AndSize(key.ptr(), &n);
    if (p == nullptr) throw py::error_already_set();
    return std::string(p, static_cast<size_t>(n));
  }
  if (PyByteArray_Check(key.ptr())) {
    return std::string(PyByteArray_AsString(key.ptr()),
                       static_cast<size_t>(PyByteArray_Size(key.ptr())));
  }
  throw py::type_error(std::string("a key is bytes or str, not ") + Py_TYPE(key.ptr())->tp_name);
}

std::vector<std::string> ToKeys(py::handle keys) {
  if (PyBytes_Check(keys.ptr()) || PyUnicode_Check(keys.ptr())) {
    throw py::type_error("expected a sequence of keys, got a single key");
  }
  std::vector<std::string> out;
  for (py::handle k : py::iter(keys)) out.push_back(ToKey(k));
  return out;
}

// `timeout_ms` as the C API takes it: 0 the client's default, > 0 that long,
// < 0 a deadline that has already passed.
Deadline ToDeadline(int64_t timeout_ms) {
  if (timeout_ms < 0) return Deadline::At(Deadline::Clock::time_point::min());
  return Deadline(static_cast<uint64_t>(timeout_ms));
}

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

py::bytes ToBytes(const std::string& s) { return py::bytes(s.data(), s.size()); }

// ----------------------------------------------------------------- Status

py::object StatusObject(const Status& s);

struct ItemStatus {
  Status status;
};

py::object StatusObject(const Status& s) { return py::cast(ItemStatus{s}); }

py::list StatusList(const std::vector<Status>& statuses) {
  py::list out;
  for (const Status& s : statuses) out.append(StatusObject(s));
  return out;
}

// ---------------------------------------------------------------- keys

std::vector<uint32_t> ToTokens(py::handle tokens) {
  std::vector<uint32_t> out;
  if (PyObject_CheckBuffer(tokens.ptr())) {
    Py_buffer view;
    if (PyObject_GetBuffer(tokens.ptr(), &view, PyBUF_FORMAT | PyBUF_ANY_CONTIGUOUS) == 0) {
      std::unique_ptr<Py_buffer, void (*)(Py_buffer*)> release(&view, PyBuffer_Release);
      std::string fmt = view.format != nullptr ? view.format : "B";
      if (!fmt.empty() && (fmt[0] == '<' || fmt[0] == '=' || fmt[0] == '@' || fmt[0] == '!')) {
        if (fmt[0] == '!') throw py::value_error("big-endian token arrays are not supported");
        fmt = fmt.substr(1);
      }
      size_t n = view.itemsize > 0 ? static_cast<size_t>(view.len / view.itemsize) : 0;
      out.resize(n);
      const char* p = static_cast<const char*>(view.buf);
      auto convert = [&](auto sample) {
        using T = decltype(sample);
        for (size_t i = 0; i < n; ++i) {
          T v;
          std::memcpy(&v, p + i * sizeof(T), sizeof(T));
          if (v < 0 || static_cast<uint64_t>(v) > 0xFFFFFFFFull) {
            throw py::value_error("token id " + std::to_string(v) + " at " + std::to_string(i) +
                                  " is outside 0..2**32-1");
          }
          out[i] = static_cast<uint32_t>(v);
        }
      };
      if (fmt == "I" && view.itemsize == 4) {
        std::memcpy(out.data(), p, n * 4);
      } else if ((fmt == "i" || fmt == "l") && view.itemsize == 4) {
        convert(int32_t{});
      } else if ((fmt == "l" || fmt == "q") && view.itemsize == 8) {
        convert(int64_t{});
      } else if ((fmt == "L" || fmt == "Q") && view.itemsize == 8) {
        convert(uint64_t{});
      } else if (fmt == "H" && view.itemsize == 2) {
        convert(uint16_t{});
      } else if (fmt == "h" && view.itemsize == 2) {
        convert(int16_t{});
      } else {
        throw py::type_error("token arrays need an integer dtype, not format '" + fmt + "'");
      }
      return out;
    }
    PyErr_Clear();  // not a contiguous typed buffer: iterate it instead
  }
  for (py::handle t : py::iter(tokens)) {
    long long v = PyLong_AsLongLong(t.ptr());
    if (v == -1 && PyErr_Occurred()) throw py::error_already_set();
    if (v < 0 || v > 0xFFFFFFFFll) {
      throw py::value_error("token id " + std::to_string(v) + " is outside 0..2**32-1");
    }
    out.push_back(static_cast<uint32_t>(v));
  }
  return out;
}

KeyNamespace MakeNamespace(std::string model, std::string dtype, std::string kv_layout,
                           uint32_t tp_rank, uint32_t tp_size, std::optional<std::string> salt,
                           uint32_t chunk_tokens) {
  KeyNamespace ns;
  ns.model = std::move(model);
  ns.dtype = std::move(dtype);
  ns.kv_layout = std::move(kv_layout);
  ns.tp_rank = tp_rank;
  ns.tp_size = tp_size;
  ns.salt = salt.value_or("");
  ns.chunk_tokens = chunk_tokens;
  return ns;
}

KeyBuilder MakeKeyBuilder(const KeyNamespace& ns) {
  std::string why;
  if (!KeyBuilder::Validate(ns, &why)) throw py::value_error("invalid key namespace: " + why);
  return KeyBuilder(ns);
}

// --------------------------------------------------------------- client

struct PyBufferHandle {
  BufferHandle handle;
  size_t size = 0;
  bool gpu = false;
};

class PyFuture;

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

  // Never null: close() ends the client but keeps the object, whose calls
  // then answer FAILED_PRECONDITION. Safe without the GIL.
  Client* get() const { return client_.get(); }

  void Close() { client_->Close(); }

  // Registered buffers keep their Python object's buffer view alive.
  PyBufferHandle Register(py::handle target, std::optional<size_t> size, bool gpu) {
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
      std::lock_guard<std::mutex> lock(mu_);
      views_.emplace(h.id, std::move(view));
    }
    return PyBufferHandle{h, bytes, gpu};
  }

  void Unregister(const PyBufferHandle& h) {
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->UnregisterBuffer(h.handle);
    }
    Check(s);
    std::unique_ptr<BufferView> view;
    {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = views_.find(h.handle.id);
      if (it != views_.end()) {
        view = std::move(it->second);
        views_.erase(it);
      }
    }
  }

 private:
  std::unique_ptr<Client> client_;
  std::mutex mu_;
  std::map<uint64_t, std::unique_ptr<BufferView>> views_;  // guarded by mu_
};

PutOptions MakePutOptions(uint32_t replicas, bool best_effort, bool prefer_local,
                          const std::string& spread_label, int64_t timeout_ms) {
  PutOptions po;
  po.replicas = replicas;
  po.best_effort = best_effort;
  po.prefer_local = prefer_local;
  po.spread_label = spread_label;
  po.deadline = ToDeadline(timeout_ms);
  return po;
}

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

// ------------------------------------------------------ storage adapter

// The shape engines' hierarchical caches use for an external tier: a miss,
// and any failure of the cluster, reads as "not there" (the engine computes
// instead); only misuse (a bad key, a closed client) raises.
class StorageAdapter {
 public:
  StorageAdapter(std::shared_ptr<PyClient> client, std::string key_prefix, uint32_t replicas,
                 int64_t timeout_ms)
      : client_(std::move(client)), prefix_(std::move(key_prefix)), timeout_ms_(timeout_ms) {
    put_options_.replicas = replicas;
  }

  py::object Get(py::handle key, py::object target) {
    std::string k = Key(key);
    if (!target.is_none()) {
      BufferView view(target, /*writable=*/true);
      size_t size = 0;
      Status s;
      {
        py::gil_scoped_release nogil;
        s = client_->get()->GetInto(k, view.data(), view.size(), &size, ToDeadline(timeout_ms_));
      }
      return Item(s) ? target : py::none();
    }
    std::string value;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Get(k, &value, ToDeadline(timeout_ms_));
    }
    return Item(s) ? py::object(ToBytes(value)) : py::none();
  }

  bool Set(py::handle key, py::handle value) {
    std::string k = Key(key);
    BufferView view(value, /*writable=*/false);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Put(k, view.data(), view.size(), PutOpts());
    }
    return Item(s);
  }

  bool Exists(py::handle key) {
    std::vector<std::string> keys = {Key(key)};
    std::vector<bool> present;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Exists(keys, &present, ToDeadline(timeout_ms_));
    }
    return Item(s) && present[0];
  }

  bool Delete(py::handle key) {
    std::string k = Key(key);
    Status s;
    {
      py::gil_scoped_release nogil;
      s = client_->get()->Remove(k, ToDeadline(timeout_ms_));
    }
    return Item(s);
  }

  py::list BatchGet(py::handle keys, py::object targets) {
    std::vector<std::string> k = Keys(keys);
    py::list out;
    if (k.empty()) return out;
    if (!targets.is_none()) {
      std::vector<py::object> t;
      for (py::handle h : py::iter(targets)) t.push_back(py::reinterpret_borrow<py::object>(h));
      if (t.size() != k.size()) throw py::value_error("batch_get: one target per key");
      std::vector<BufferView> views;
      for (const py::object& o : t) views.emplace_back(o, /*writable=*/true);
      std::vector<Status> statuses(k.size());
      {
        py::gil_scoped_release nogil;
        // Chunks of the batch limit, each one Lookup and parallel reads
        // straight into the targets.
        for (size_t base = 0; base < k.size(); base += kBatchItemsMax) {
          size_t n = std::min(kBatchItemsMax, k.size() - base);
          std::vector<std::string> chunk(k.begin() + base, k.begin() + base + n);
          std::vector<void*> ptrs;
          std::vector<size_t> caps;
          for (size_t i = base; i < base + n; ++i) {
            ptrs.push_back(views[i].data());
            caps.push_back(views[i].size());
          }
          std::vector<Status> st;
          Status s = BatchGetIntoMemory(client_->get(), chunk, ptrs, caps, ToDeadline(timeout_ms_),
                                        &st, nullptr);
          for (size_t i = 0; i < n; ++i) statuses[base + i] = s.ok() ? st[i] : s;
        }
      }
      for (size_t i = 0; i < k.size(); ++i) out.append(Item(statuses[i]) ? t[i] : py::none());
      return out;
    }
    std::vector<std::string> values(k.size());
    std::vector<Status> statuses(k.size());
    {
      py::gil_scoped_release nogil;
      for (size_t base = 0; base < k.size(); base += kBatchItemsMax) {
        size_t n = std::min(kBatchItemsMax, k.size() - base);
        std::vector<std::string> chunk(k.begin() + base, k.begin() + base + n);
        std::vector<std::string> v;
        std::vector<Status> st;
        Status s = client_->get()->BatchGet(chunk, &v, &st, ToDeadline(timeout_ms_));
        for (size_t i = 0; i < n; ++i) {
          statuses[base + i] = s.ok() ? st[i] : s;
          if (s.ok()) values[base + i] = std::move(v[i]);
        }
      }
    }
    for (size_t i = 0; i < k.size(); ++i) {
      out.append(Item(statuses[i]) ? py::object(ToBytes(values[i])) : py::none());
    }
    return out;
  }

  bool BatchSet(py::handle keys, py::handle values) {
    std::vector<std::string> k = Keys(keys);
    std::vector<BufferView> views;
    for (py::handle v : py::iter(values)) views.emplace_back(v, /*writable=*/false);
    if (views.size() != k.size()) throw py::value_error("batch_set: one value per key");
    if (k.empty()) return true;
    bool all = true;
    std::vector<Status> results;
    {
      py::gil_scoped_release nogil;
      for (size_t base = 0; base < k.size(); base += kBatchItemsMax) {
        size_t n = std::min(kBatchItemsMax, k.size() - base);
        std::vector<PutItem> items;
        for (size_t i = base; i < base + n; ++i) {
          items.push_back(PutItem{k[i], views[i].data(), views[i].size()});
        }
        std::vector<Status> st;
        Status s = client_->get()->BatchPut(items, &st, PutOpts());
        for (size_t i = 0; i < n; ++i) results.push_back(s.ok() ? st[i] : s);
      }
    }
    for (const Status& s : results) all = Item(s) && all;
    return all;
  }

  // The number of leading keys present: one MatchPrefix, which also leases
  // them so a batch_get right after finds them.
  size_t BatchExists(py::handle keys) {
    std::vector<std::string> k = Keys(keys);
    size_t total = 0;
    for (size_t base = 0; base < k.size(); base += kBatchItemsMax) {
      size_t n = std::min(kBatchItemsMax, k.size() - base);
      std::vector<std::string> chunk(k.begin() + base, k.begin() + base + n);
      size_t matched = 0;
      Status s;
      {
        py::gil_scoped_release nogil;
        s = client_->get()->MatchPrefix(chunk, &matched, ToDeadline(timeout_ms_));
      }
      if (!Item(s)) return total;
      total += matched;
      if (matched < n) break;
    }
    return total;
  }

  std::string last_error() {
    std::lock_guard<std::mutex> lock(mu_);
    return last_error_;
  }
  const std::shared_ptr<PyClient>& client() const { return client_; }

 private:
  std::string Key(py::handle key) const { return prefix_ + ToKey(key); }
  std::vector<std::string> Keys(py::handle keys) const {
    std::vector<std::string> k = ToKeys(keys);
    for (std::string& s : k) s = prefix_ + s;
    return k;
  }
  PutOptions PutOpts() const {
    PutOptions po = put_options_;
    po.deadline = ToDeadline(timeout_ms_);
    return po;
  }
  // True for OK. Misuse raises; anything else is "not there" and noted.
  bool Item(const Status& s) {
    if (s.ok()) return true;
    if (s.code() == StatusCode::kInvalidArgument || s.code() == StatusCode::kFailedPrecondition) {
      Raise(s);
    }
    if (s.code() != StatusCode::kNotFound) {
      std::lock_guard<std::mutex> lock(mu_);
      last_error_ = s.ToString();
    }
    return false;
  }

  std::shared_ptr<PyClient> client_;
  const std::string prefix_;
  const int64_t timeout_ms_;
  PutOptions put_options_;
  std::mutex mu_;
  std::string last_error_;  // guarded by mu_
};

std::string ToKeyPrefix(py::handle prefix) {
  if (prefix.is_none()) return std::string();
  return ToKey(prefix);
}

}  // namespace
}  // namespace shelf

PYBIND11_MODULE(shelf, m) {
  using namespace shelf;  // NOLINT: the module body names every type
  m.doc() =
      "Shelf: a distributed KV-cache block store for LLM inference. Client, content keys "
      "(KeyNamespace, KeyBuilder) and StorageAdapter; see docs/client.md.";

  RegisterErrors(m);
  m.attr("KEY_VERSION") = static_cast<int>(kKeyVersion);
  m.attr("KEY_BYTES") = kKeyBytes;
  m.attr("KEY_BYTES_MAX") = kKeyBytesMax;
  m.attr("BATCH_ITEMS_MAX") = kBatchItemsMax;

  py::enum_<StatusCode>(m, "StatusCode", "Status codes (the canonical gRPC / Abseil codes).")
      .value("OK", StatusCode::kOk)
      .value("CANCELLED", StatusCode::kCancelled)
      .value("UNKNOWN", StatusCode::kUnknown)
      .value("INVALID_ARGUMENT", StatusCode::kInvalidArgument)
      .value("DEADLINE_EXCEEDED", StatusCode::kDeadlineExceeded)
      .value("NOT_FOUND", StatusCode::kNotFound)
      .value("ALREADY_EXISTS", StatusCode::kAlreadyExists)
      .value("PERMISSION_DENIED", StatusCode::kPermissionDenied)
      .value("RESOURCE_EXHAUSTED", StatusCode::kResourceExhausted)
      .value("FAILED_PRECONDITION", StatusCode::kFailedPrecondition)
      .value("ABORTED", StatusCode::kAborted)
      .value("OUT_OF_RANGE", StatusCode::kOutOfRange)
      .value("UNIMPLEMENTED", StatusCode::kUnimplemented)
      .value("INTERNAL", StatusCode::kInternal)
      .value("UNAVAILABLE", StatusCode::kUnavailable)
      .value("DATA_LOSS", StatusCode::kDataLoss)
      .value("UNAUTHENTICATED", StatusCode::kUnauthenticated);

  py::class_<ItemStatus>(m, "Status", "The outcome of one item of a batch.")
      .def_property_readonly("code", [](const ItemStatus& s) { return s.status.code(); })
      .def_property_readonly("name",
                             [](const ItemStatus& s) { return StatusCodeName(s.status.code()); })
      .def_property_readonly("message", [](const ItemStatus& s) { return s.status.message(); })
      .def_property_readonly("ok", [](const ItemStatus& s) { return s.status.ok(); })
      .def("__bool__", [](const ItemStatus& s) { return s.status.ok(); })
      .def("__repr__",
           [](const ItemStatus& s) { return "<shelf.Status " + s.status.ToString() + ">"; })
      .def(
          "raise_if_error", [](const ItemStatus& s) { Check(s.status); },
          "Raises the matching shelf.Error unless OK.");

  // ---------------------------------------------------------------- keys
  py::class_<KeyNamespace>(m, "KeyNamespace",
                           "Everything that must differ for two caches to hold different "
                           "bytes for the same tokens (docs/keys.md).")
      .def(py::init(&MakeNamespace), py::arg("model") = "", py::arg("dtype") = "",
           py::arg("kv_layout") = "", py::arg("tp_rank") = 0, py::arg("tp_size") = 1,
           py::arg("salt") = py::none(), py::arg("chunk_tokens") = 512)
      .def_readwrite("model", &KeyNamespace::model)
      .def_readwrite("dtype", &KeyNamespace::dtype)
      .def_readwrite("kv_layout", &KeyNamespace::kv_layout)
      .def_readwrite("tp_rank", &KeyNamespace::tp_rank)
      .def_readwrite("tp_size", &KeyNamespace::tp_size)
      .def_property(
          "salt", [](const KeyNamespace& ns) { return ns.salt; },
          [](KeyNamespace& ns, std::optional<std::string> salt) { ns.salt = salt.value_or(""); })
      .def_readwrite("chunk_tokens", &KeyNamespace::chunk_tokens)
      .def("__repr__", [](const KeyNamespace& ns) {
        return "KeyNamespace(model=" + py::repr(py::str(ns.model)).cast<std::string>() +
               ", dtype=" + py::repr(py::str(ns.dtype)).cast<std::string>() +
               ", kv_layout=" + py::repr(py::str(ns.kv_layout)).cast<std::string>() +
               ", tp_rank=" + std::to_string(ns.tp_rank) +
               ", tp_size=" + std::to_string(ns.tp_size) +
               ", salt=" + py::repr(py::str(ns.salt)).cast<std::string>() +
               ", chunk_tokens=" + std::to_string(ns.chunk_tokens) + ")";
      });

  py::class_<KeyBuilder>(m, "KeyBuilder",
                         "Builds the content keys of one namespace; the same keys as the C++ "
                         "shelf::KeyBuilder. Raises ValueError for an invalid namespace.")
      .def(py::init(&MakeKeyBuilder), py::arg("namespace"))
      .def_static(
          "validate",
          [](const KeyNamespace& ns) -> std::optional<std::string> {
            std::string why;
            if (KeyBuilder::Validate(ns, &why)) return std::nullopt;
            return why;
          },
          py::arg("namespace"), "None when valid, else the reason.")
      .def(
          "block_keys",
          [](const KeyBuilder& kb, py::handle tokens) {
            std::vector<uint32_t> t = ToTokens(tokens);
            std::vector<std::string> keys;
            {
              py::gil_scoped_release nogil;
              keys = kb.BlockKeys(t);
            }
            py::list out;
            for (const std::string& k : keys) out.append(ToBytes(k));
            return out;
          },
          py::arg("tokens"),
          "One key (bytes) per full chunk of `tokens` (a sequence of ints or an integer "
          "array); a partial tail gets none.")
      .def(
          "extend",
          [](const KeyBuilder& kb, py::bytes previous_key, py::handle chunk) {
            std::vector<uint32_t> t = ToTokens(chunk);
            if (t.size() != kb.key_namespace().chunk_tokens) {
              throw py::value_error(
                  "extend: the chunk holds " + std::to_string(t.size()) +
                  " tokens, not chunk_tokens=" + std::to_string(kb.key_namespace().chunk_tokens));
            }
            std::string key = kb.Extend(std::string(previous_key), t.data());
            if (key.empty()) throw py::value_error("extend: previous_key is not a version-1 key");
            return ToBytes(key);
          },
          py::arg("previous_key"), py::arg("chunk"),
          "The key of `chunk` following the block keyed `previous_key` (b'' for the first).")
      .def_property_readonly("key_namespace", &KeyBuilder::key_namespace)
      .def_property_readonly("namespace_digest",
                             [](const KeyBuilder& kb) { return ToBytes(kb.namespace_digest()); })
      .def_static(
          "serialize_namespace",
          [](const KeyNamespace& ns) { return ToBytes(KeyBuilder::SerializeNamespace(ns)); },
          py::arg("namespace"))
      .def_static(
          "to_hex", [](py::bytes b) { return KeyBuilder::ToHex(std::string(b)); }, py::arg("key"))
      .def_static(
          "from_hex",
          [](const std::string& hex) {
            std::string bytes;
            if (!KeyBuilder::FromHex(hex, &bytes)) throw py::value_error("not a hex string");
            return ToBytes(bytes);
          },
          py::arg("hex"));

  // --------------------------------------------------------------- client
  py::class_<PyBufferHandle>(m, "BufferHandle", "Memory registered with Client.register_buffer.")
      .def_property_readonly("id", [](const PyBufferHandle& h) { return h.handle.id; })
      .def_property_readonly("size", [](const PyBufferHandle& h) { return h.size; })
      .def_property_readonly("gpu", [](const PyBufferHandle& h) { return h.gpu; })
      .def("__repr__", [](const PyBufferHandle& h) {
        return "<shelf.BufferHandle id=" + std::to_string(h.handle.id) +
               " size=" + std::to_string(h.size) + (h.gpu ? " gpu>" : ">");
      });

  py::class_<PyFuture>(m, "Future",
                       "An asynchronous batch. Dropping it waits for the batch to finish.")
      .def("done", &PyFuture::Done, "True when the batch has finished (never blocks).")
      .def("wait", &PyFuture::Wait, py::arg("timeout") = py::none(),
           "Waits up to `timeout` seconds (None: until done); True when done.")
      .def("result", &PyFuture::Result,
           "Waits, then: batch_get_async: list of bytes or None; batch_put_async: list of "
           "Status; batch_get_into_async: list of sizes or None. Raises when the whole batch "
           "failed.")
      .def("statuses", &PyFuture::Statuses, "Waits, then one Status per item.");

  py::class_<PyClient, std::shared_ptr<PyClient>>(m, "Client",
                                                  "A connection to a Shelf cluster. "
                                                  "Thread-safe.")
      .def(
          py::init([](py::object masters, const std::string& secret, uint64_t timeout_ms,
                      bool allow_tcp, bool allow_shm, bool verify_checksums,
                      const std::string& tls_ca, uint32_t transfer_threads, uint32_t async_threads,
                      uint32_t async_queue_max, uint32_t tcp_streams_per_block,
                      const std::string& rdma_device, uint32_t rdma_port, uint32_t rdma_gid_index) {
            ClientOptions o;
            if (py::isinstance<py::str>(masters)) {
              std::string all = masters.cast<std::string>();
              size_t start = 0;
              while (start <= all.size()) {
                size_t comma = all.find(',', start);
                if (comma == std::string::npos) comma = all.size();
                if (comma > start) o.masters.push_back(all.substr(start, comma - start));
                start = comma + 1;
              }
            } else {
              o.masters = masters.cast<std::vector<std::string>>();
            }
            o.secret = secret;
            o.timeout_ms = timeout_ms;
            o.allow_tcp = allow_tcp;
            o.allow_shm = allow_shm;
            o.verify_checksums = verify_checksums;
            o.tls_ca = tls_ca;
            o.transfer_threads = transfer_threads;
            o.async_threads = async_threads;
            o.async_queue_max = async_queue_max;
            o.tcp_streams_per_block = tcp_streams_per_block;
            o.rdma_device = rdma_device;
            o.rdma_port = rdma_port;
            o.rdma_gid_index = rdma_gid_index;
            return std::make_shared<PyClient>(o);
          }),
          py::arg("masters"), py::kw_only(), py::arg("secret") = "", py::arg("timeout_ms") = 5000,
          py::arg("allow_tcp") = true, py::arg("allow_shm") = true,
          py::arg("verify_checksums") = true, py::arg("tls_ca") = "",
          py::arg("transfer_threads") = 8, py::arg("async_threads") = 4,
          py::arg("async_queue_max") = 256, py::arg("tcp_streams_per_block") = 4,
          py::arg("rdma_device") = "", py::arg("rdma_port") = 1, py::arg("rdma_gid_index") = 0)
      .def(
          "put",
          [](PyClient& c, py::handle key, py::handle value, uint32_t replicas, bool best_effort,
             bool prefer_local, const std::string& spread_label, int64_t timeout_ms) {
            std::string k = ToKey(key);
            BufferView v(value, /*writable=*/false);
            PutOptions po =
                MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->Put(k, v.data(), v.size(), po);
            }
            Check(s);
          },
          py::arg("key"), py::arg("value"), py::kw_only(), py::arg("replicas") = 1,
          py::arg("best_effort") = false, py::arg("prefer_local") = false,
          py::arg("spread_label") = "", py::arg("timeout_ms") = 0,
          "Stores `value` (any bytes-like object). Succeeds also when the key exists.")
      .def(
          "get",
          [](PyClient& c, py::handle key, int64_t timeout_ms) -> py::object {
            std::string k = ToKey(key);
            std::string value;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->Get(k, &value, ToDeadline(timeout_ms));
            }
            if (s.code() == StatusCode::kNotFound) return py::none();
            Check(s);
            return ToBytes(value);
          },
          py::arg("key"), py::kw_only(), py::arg("timeout_ms") = 0,
          "The block as bytes, or None on a miss.")
      .def(
          "get_into",
          [](PyClient& c, py::handle key, py::handle target, size_t offset,
             std::optional<size_t> capacity, int64_t timeout_ms) -> py::object {
            std::string k = ToKey(key);
            size_t size = 0;
            Status s;
            if (py::isinstance<PyBufferHandle>(target)) {
              PyBufferHandle h = target.cast<PyBufferHandle>();
              size_t cap = capacity ? *capacity : (offset <= h.size ? h.size - offset : 0);
              py::gil_scoped_release nogil;
              s = c.get()->GetInto(k, h.handle, offset, cap, &size, ToDeadline(timeout_ms));
            } else {
              BufferView v(target, /*writable=*/true);
              if (offset > v.size()) {
                Raise(Status(StatusCode::kOutOfRange, "offset " + std::to_string(offset) +
                                                          " is past the end of the buffer of " +
                                                          std::to_string(v.size()) + " bytes"));
              }
              size_t cap = capacity ? *capacity : v.size() - offset;
              if (cap > v.size() - offset) {
                Raise(Status(StatusCode::kOutOfRange, "capacity runs past the buffer's end"));
              }
              py::gil_scoped_release nogil;
              s = c.get()->GetInto(k, v.data() + offset, cap, &size, ToDeadline(timeout_ms));
            }
            if (s.code() == StatusCode::kNotFound) return py::none();
            Check(s);
            return py::int_(size);
          },
          py::arg("key"), py::arg("target"), py::kw_only(), py::arg("offset") = 0,
          py::arg("capacity") = py::none(), py::arg("timeout_ms") = 0,
          "Reads the block straight into `target` (a writable buffer: bytearray, memoryview, "
          "numpy array; or a BufferHandle) at `offset`; returns its size, or None on a miss. "
          "OutOfRangeError when it does not fit.")
      .def(
          "put_from",
          [](PyClient& c, py::handle key, py::handle source, size_t offset,
             std::optional<size_t> size, uint32_t replicas, bool best_effort, bool prefer_local,
             const std::string& spread_label, int64_t timeout_ms) {
            std::string k = ToKey(key);
            PutOptions po =
                MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
            Status s;
            if (py::isinstance<PyBufferHandle>(source)) {
              PyBufferHandle h = source.cast<PyBufferHandle>();
              size_t n = size ? *size : (offset <= h.size ? h.size - offset : 0);
              py::gil_scoped_release nogil;
              s = c.get()->PutFrom(k, h.handle, offset, n, po);
            } else {
              BufferView v(source, /*writable=*/false);
              if (offset > v.size()) {
                Raise(Status(StatusCode::kOutOfRange, "offset " + std::to_string(offset) +
                                                          " is past the end of the buffer of " +
                                                          std::to_string(v.size()) + " bytes"));
              }
              size_t n = size ? *size : v.size() - offset;
              if (n > v.size() - offset) {
                Raise(Status(StatusCode::kOutOfRange, "size runs past the buffer's end"));
              }
              py::gil_scoped_release nogil;
              s = c.get()->Put(k, v.data() + offset, n, po);
            }
            Check(s);
          },
          py::arg("key"), py::arg("source"), py::kw_only(), py::arg("offset") = 0,
          py::arg("size") = py::none(), py::arg("replicas") = 1, py::arg("best_effort") = false,
          py::arg("prefer_local") = false, py::arg("spread_label") = "", py::arg("timeout_ms") = 0,
          "Stores bytes [offset, offset+size) of `source` (a buffer or a BufferHandle) "
          "without copying them first.")
      .def(
          "exists",
          [](PyClient& c, py::handle keys, int64_t timeout_ms) -> py::object {
            bool single = PyBytes_Check(keys.ptr()) || PyUnicode_Check(keys.ptr());
            std::vector<std::string> k =
                single ? std::vector<std::string>{ToKey(keys)} : ToKeys(keys);
            std::vector<bool> present;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->Exists(k, &present, ToDeadline(timeout_ms));
            }
            Check(s);
            if (single) return py::bool_(present[0]);
            return py::cast(present);
          },
          py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
          "For one key: bool. For a sequence: list of bools.")
      .def(
          "remove",
          [](PyClient& c, py::handle key, int64_t timeout_ms) {
            std::string k = ToKey(key);
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->Remove(k, ToDeadline(timeout_ms));
            }
            if (s.code() == StatusCode::kNotFound) return false;
            Check(s);
            return true;
          },
          py::arg("key"), py::kw_only(), py::arg("timeout_ms") = 0,
          "True when removed, False when absent. FailedPreconditionError if pinned.")
      .def(
          "match_prefix",
          [](PyClient& c, py::handle keys, int64_t timeout_ms) {
            std::vector<std::string> k = ToKeys(keys);
            size_t matched = 0;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->MatchPrefix(k, &matched, ToDeadline(timeout_ms));
            }
            Check(s);
            return matched;
          },
          py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
          "The number of leading keys present (read leases taken on them).")
      .def(
          "batch_get",
          [](PyClient& c, py::handle keys, int64_t timeout_ms, bool return_statuses) -> py::object {
            std::vector<std::string> k = ToKeys(keys);
            std::vector<std::string> values;
            std::vector<Status> st;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->BatchGet(k, &values, &st, ToDeadline(timeout_ms));
            }
            Check(s);
            py::list out;
            for (size_t i = 0; i < k.size(); ++i) {
              out.append(st[i].ok() ? py::object(ToBytes(values[i])) : py::none());
            }
            if (return_statuses) return py::make_tuple(out, StatusList(st));
            return out;
          },
          py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
          py::arg("return_statuses") = false,
          "A list of bytes, None where the block is missing or unreadable; with "
          "return_statuses=True, (values, statuses).")
      .def(
          "batch_get_into",
          [](PyClient& c, py::handle keys, py::handle targets, int64_t timeout_ms,
             bool return_statuses) -> py::object {
            std::vector<std::string> k = ToKeys(keys);
            std::vector<BufferView> views;
            for (py::handle t : py::iter(targets)) views.emplace_back(t, /*writable=*/true);
            if (views.size() != k.size()) throw py::value_error("one target per key");
            std::vector<void*> ptrs;
            std::vector<size_t> caps;
            for (const BufferView& v : views) {
              ptrs.push_back(v.data());
              caps.push_back(v.size());
            }
            std::vector<Status> st;
            std::vector<size_t> sizes;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = BatchGetIntoMemory(c.get(), k, ptrs, caps, ToDeadline(timeout_ms), &st, &sizes);
            }
            Check(s);
            py::list out;
            for (size_t i = 0; i < k.size(); ++i) {
              out.append(st[i].ok() ? py::object(py::int_(sizes[i])) : py::none());
            }
            if (return_statuses) return py::make_tuple(out, StatusList(st));
            return out;
          },
          py::arg("keys"), py::arg("targets"), py::kw_only(), py::arg("timeout_ms") = 0,
          py::arg("return_statuses") = false,
          "Reads block i into targets[i]; a list of sizes, None where missing or unreadable.")
      .def(
          "batch_put",
          [](PyClient& c, py::handle keys, py::handle values, uint32_t replicas, bool best_effort,
             bool prefer_local, const std::string& spread_label, int64_t timeout_ms) {
            std::vector<std::string> k = ToKeys(keys);
            std::vector<BufferView> views;
            for (py::handle v : py::iter(values)) views.emplace_back(v, /*writable=*/false);
            if (views.size() != k.size()) throw py::value_error("one value per key");
            std::vector<PutItem> items;
            for (size_t i = 0; i < k.size(); ++i) {
              items.push_back(PutItem{k[i], views[i].data(), views[i].size()});
            }
            PutOptions po =
                MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
            std::vector<Status> st;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->BatchPut(items, &st, po);
            }
            Check(s);
            return StatusList(st);
          },
          py::arg("keys"), py::arg("values"), py::kw_only(), py::arg("replicas") = 1,
          py::arg("best_effort") = false, py::arg("prefer_local") = false,
          py::arg("spread_label") = "", py::arg("timeout_ms") = 0,
          "Stores values[i] under keys[i]; one Status per item.")
      .def(
          "batch_get_async",
          [](PyClient& c, py::handle keys, int64_t timeout_ms) {
            std::vector<std::string> k = ToKeys(keys);
            BatchFuture f = c.get()->BatchGetAsync(std::move(k), ToDeadline(timeout_ms));
            return std::make_unique<PyFuture>(PyFuture::Kind::kGet, std::move(f),
                                              std::vector<BufferView>(), py::list());
          },
          py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
          "Starts batch_get on the client's async threads; returns a Future.")
      .def(
          "batch_put_async",
          [](PyClient& c, py::handle keys, py::handle values, uint32_t replicas,
             int64_t timeout_ms) {
            std::vector<std::string> k = ToKeys(keys);
            std::vector<BufferView> views;
            for (py::handle v : py::iter(values)) views.emplace_back(v, /*writable=*/false);
            if (views.size() != k.size()) throw py::value_error("one value per key");
            std::vector<PutItem> items;
            for (size_t i = 0; i < k.size(); ++i) {
              items.push_back(PutItem{k[i], views[i].data(), views[i].size()});
            }
            PutOptions po = MakePutOptions(replicas, false, false, "", timeout_ms);
            BatchFuture f = c.get()->BatchPutAsync(std::move(items), po);
            return std::make_unique<PyFuture>(PyFuture::Kind::kPut, std::move(f), std::move(views),
                                              py::list());
          },
          py::arg("keys"), py::arg("values"), py::kw_only(), py::arg("replicas") = 1,
          py::arg("timeout_ms") = 0,
          "Starts batch_put; the values stay referenced (and must not change) until done.")
      .def(
          "batch_get_into_async",
          [](PyClient& c, py::handle keys, py::handle handle, std::vector<size_t> offsets,
             size_t capacity, int64_t timeout_ms) {
            std::vector<std::string> k = ToKeys(keys);
            PyBufferHandle h = handle.cast<PyBufferHandle>();
            if (offsets.size() != k.size()) throw py::value_error("one offset per key");
            std::vector<GetIntoItem> items;
            for (size_t i = 0; i < k.size(); ++i) {
              items.push_back(GetIntoItem{k[i], h.handle, offsets[i], capacity});
            }
            BatchFuture f = c.get()->BatchGetIntoAsync(std::move(items), ToDeadline(timeout_ms));
            return std::make_unique<PyFuture>(PyFuture::Kind::kGetInto, std::move(f),
                                              std::vector<BufferView>(), py::list());
          },
          py::arg("keys"), py::arg("buffer"), py::arg("offsets"), py::arg("capacity"),
          py::kw_only(), py::arg("timeout_ms") = 0,
          "Starts reading block i into [offsets[i], offsets[i]+capacity) of a registered "
          "buffer; returns a Future whose result() is the sizes.")
      .def("register_buffer", &PyClient::Register, py::arg("target"), py::arg("size") = py::none(),
           py::arg("gpu") = false,
           "Registers a writable buffer (kept referenced until unregistered) or a raw address "
           "(int, with size=; e.g. a CUDA tensor's data_ptr() with gpu=True). Returns a "
           "BufferHandle for get_into / put_from / batch_get_into_async.")
      .def("unregister_buffer", &PyClient::Unregister, py::arg("handle"),
           "Waits for calls using the buffer, then forgets it.")
      .def("stats",
           [](PyClient& c) {
             ClientStats s = c.get()->stats();
             py::dict d;
             d["bytes_stored"] = s.bytes_stored;
             d["bytes_loaded"] = s.bytes_loaded;
             d["bytes_loaded_shm"] = s.bytes_loaded_shm;
             d["bytes_loaded_rdma"] = s.bytes_loaded_rdma;
             d["bytes_loaded_tcp"] = s.bytes_loaded_tcp;
             d["bytes_loaded_ssd"] = s.bytes_loaded_ssd;
             d["blocks_loaded_dram"] = s.blocks_loaded_dram;
             d["blocks_loaded_ssd"] = s.blocks_loaded_ssd;
             d["checksum_mismatches"] = s.checksum_mismatches;
             d["replica_failovers"] = s.replica_failovers;
             d["bytes_staged_gpu"] = s.bytes_staged_gpu;
             return d;
           })
      .def("close", &PyClient::Close,
           "Later calls raise FailedPreconditionError; calls in progress finish.")
      .def("__enter__", [](std::shared_ptr<PyClient> c) { return c; })
      .def("__exit__", [](PyClient& c, py::args) {
        c.Close();
        return false;
      });

  py::class_<StorageAdapter>(
      m, "StorageAdapter",
      "A storage backend with the shape engines' hierarchical caches use: get/set/exists and "
      "batch forms, keys as str or bytes, values as any bytes-like object. A miss, or a "
      "cluster that cannot answer, reads as not there (None / False / 0) and is noted in "
      "last_error; misuse (a bad key, a closed client) raises.")
      .def(py::init([](std::shared_ptr<PyClient> client, py::object masters, py::handle key_prefix,
                       uint32_t replicas, int64_t timeout_ms) {
             if (!client) {
               if (masters.is_none())
                 throw py::value_error("StorageAdapter needs client or masters");
               ClientOptions o;
               if (py::isinstance<py::str>(masters)) {
                 o.masters = {masters.cast<std::string>()};
               } else {
                 o.masters = masters.cast<std::vector<std::string>>();
               }
               client = std::make_shared<PyClient>(o);
             }
             return std::make_unique<StorageAdapter>(std::move(client), ToKeyPrefix(key_prefix),
                                                     replicas, timeout_ms);
           }),
           py::arg("client") = nullptr, py::kw_only(), py::arg("masters") = py::none(),
           py::arg("key_prefix") = py::none(), py::arg("replicas") = 1, py::arg("timeout_ms") = 0)
      .def("get", &StorageAdapter::Get, py::arg("key"), py::arg("target") = py::none(),
           "The value as bytes (or read into `target` and returned), None when absent.")
      .def("set", &StorageAdapter::Set, py::arg("key"), py::arg("value"),
           "True when stored (or already there).")
      .def("exists", &StorageAdapter::Exists, py::arg("key"))
      .def("delete", &StorageAdapter::Delete, py::arg("key"), "True when removed.")
      .def("batch_get", &StorageAdapter::BatchGet, py::arg("keys"), py::arg("targets") = py::none(),
           "One value (or target) or None per key.")
      .def("batch_set", &StorageAdapter::BatchSet, py::arg("keys"), py::arg("values"),
           "True when every value was stored.")
      .def("batch_exists", &StorageAdapter::BatchExists, py::arg("keys"),
           "The number of leading keys present.")
      .def_property_readonly("client", &StorageAdapter::client)
      .def_property_readonly("last_error", &StorageAdapter::last_error,
                             "The most recent failure other than a miss, for logs ('' if none).");
}
