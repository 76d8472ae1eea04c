// Content keys for Python: shelf.KeyNamespace and shelf.KeyBuilder, the same
// keys as the C++ shelf::KeyBuilder (docs/keys.md).
#include <pybind11/stl.h>

#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "client/python/module.h"
#include "shelf/keys.h"

namespace shelf::python {
namespace {

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
                           uint32_t tp_rank, uint32_t tp_size,
                           const std::optional<std::string>& salt, uint32_t chunk_tokens) {
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

}  // namespace

void BindKeys(py::module_& m) {
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
          [](KeyNamespace& ns, const std::optional<std::string>& salt) {
            ns.salt = salt.value_or("");
          })
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
          [](const KeyBuilder& kb, const py::bytes& previous_key, py::handle chunk) {
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
          "to_hex", [](const py::bytes& b) { return KeyBuilder::ToHex(std::string(b)); },
          py::arg("key"))
      .def_static(
          "from_hex",
          [](const std::string& hex) {
            std::string bytes;
            if (!KeyBuilder::FromHex(hex, &bytes)) throw py::value_error("not a hex string");
            return ToBytes(bytes);
          },
          py::arg("hex"));
}

}  // namespace shelf::python
