// Errors, conversions and Status items of the `shelf` Python module.
#include "client/python/module.h"

#include <algorithm>
#include <cstring>

namespace shelf::python {
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

// Smaller values are copied with the GIL held: releasing and taking it
// back costs more than their copy.
constexpr size_t kCopyWithoutGilBytes = size_t{64} << 10;

}  // namespace

py::bytes ToBytes(const std::string& s) {
  if (s.size() < kCopyWithoutGilBytes) return py::bytes(s.data(), s.size());
  PyObject* out = PyBytes_FromStringAndSize(nullptr, static_cast<Py_ssize_t>(s.size()));
  if (out == nullptr) throw py::error_already_set();
  char* dst = PyBytes_AS_STRING(out);
  {
    py::gil_scoped_release nogil;
    std::copy_n(s.data(), s.size(), dst);
  }
  return py::reinterpret_steal<py::bytes>(out);
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
// ----------------------------------------------------------------- Status

py::object StatusObject(const Status& s) { return py::cast(ItemStatus{s}); }

py::list StatusList(const std::vector<Status>& statuses) {
  py::list out;
  for (const Status& s : statuses) out.append(StatusObject(s));
  return out;
}

}  // namespace shelf::python
