// shelf.mooncake: Mooncake Store's Python API (`mooncake.store`) over
// libshelf, so engines written against MooncakeDistributedStore (vLLM's
// MooncakeStoreConnector, SGLang HiCache, LMCache's mooncakestore://) run on
// a Shelf cluster unchanged.
//
//   from shelf.mooncake import MooncakeDistributedStore, ReplicateConfig
//   store = MooncakeDistributedStore()
//   store.setup("host", "P2PHANDSHAKE", 0, 0, "tcp", "", "10.0.0.1:7000")
//   store.put("k", b"bytes")                   # 0
//   store.get("k")                             # b"bytes"; b"" on a miss
//
// The class is MooncakeStore (client/mooncake/store.h), which holds no
// Python; this file converts the arguments and results, and releases the
// GIL around every call into it.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/mooncake/store.h"
#include "client/python/module.h"

namespace shelf::python {

using mooncake::HostMemAllocator;
using mooncake::kDefaultSegmentBytes;
using mooncake::kMcNotSupported;
using mooncake::kMcOk;
using mooncake::MooncakeStore;
using mooncake::ReplicaDescriptor;
using mooncake::ReplicaStatus;
using mooncake::ReplicateConfig;
using mooncake::SetupExtras;

namespace {

// A block read with get_buffer: owns its bytes; ptr() / size() / the buffer
// protocol, as Mooncake's BufferHandle.
struct ReadBuffer {
  std::string bytes;
};

// Mooncake's setup dict as MooncakeStore::SetupConfig reads it: each value
// that is not None as its str() (ints as digits, True as "True").
std::map<std::string, std::string> ConfigText(const py::dict& config) {
  std::map<std::string, std::string> out;
  for (auto [key, value] : config) {
    if (value.is_none()) continue;
    out[py::str(key).cast<std::string>()] = py::str(value).cast<std::string>();
  }
  return out;
}

// The block of get and get_buffer, read without the GIL; false for a miss
// or an error (Mooncake answers b"" or None for either).
bool ReadValue(MooncakeStore& s, const std::string& key, std::string* value) {
  py::gil_scoped_release nogil;
  return s.Get(key, value) == kMcOk;
}

// The blocks of get_batch and batch_get_buffer: values and per-key
// statuses, read without the GIL.
void ReadValues(MooncakeStore& s, const std::vector<std::string>& keys,
                std::vector<std::string>* values, std::vector<Status>* statuses) {
  values->assign(keys.size(), std::string());
  statuses->assign(keys.size(), Status(StatusCode::kInvalidArgument, "bad key"));
  py::gil_scoped_release nogil;
  s.BatchGetValues(keys, values, statuses);
}

// put (replace false) and upsert of a bytes-like value.
int PutValue(MooncakeStore& s, const std::string& key, py::handle value,
             const ReplicateConfig& config, bool replace) {
  BufferView v(value, /*writable=*/false);
  py::gil_scoped_release nogil;
  return replace ? s.Upsert(key, v.data(), v.size(), config)
                 : s.Put(key, v.data(), v.size(), config);
}

}  // namespace

void BindMooncake(py::module_& parent) {
  py::module_ m =
      parent.def_submodule("mooncake",
                           "Mooncake Store's Python API (mooncake.store) over a Shelf cluster; see "
                           "docs/mooncake-compat.md.");
  // Importable by its full name (shelf._shelf.mooncake); the package's
  // shelf/mooncake.py re-exports it as shelf.mooncake.
  std::string name = parent.attr("__name__").cast<std::string>() + ".mooncake";
  py::module_::import("sys").attr("modules")[py::str(name)] = m;

  // Mooncake's enums, with its values (types.h).
  py::enum_<mooncake::SoftPinAction>(m, "SoftPinAction")
      .value("PRESERVE", mooncake::SoftPinAction::kPreserve)
      .value("ENABLE", mooncake::SoftPinAction::kEnable)
      .value("DISABLE", mooncake::SoftPinAction::kDisable)
      .export_values();
  py::enum_<mooncake::ObjectDataType>(m, "ObjectDataType")
      .value("UNKNOWN", mooncake::ObjectDataType::kUnknown)
      .value("KVCACHE", mooncake::ObjectDataType::kKvCache)
      .export_values();
  py::enum_<ReplicaStatus>(m, "ReplicaStatus")
      .value("UNDEFINED", ReplicaStatus::kUndefined)
      .value("INITIALIZED", ReplicaStatus::kInitialized)
      .value("PROCESSING", ReplicaStatus::kProcessing)
      .value("COMPLETE", ReplicaStatus::kComplete)
      .value("REMOVED", ReplicaStatus::kRemoved)
      .value("FAILED", ReplicaStatus::kFailed)
      .export_values();

  // batch_get_replica_desc's descriptors: the methods Mooncake's
  // ReplicaDescriptor has for its tiers, and the store that holds it.
  py::class_<ReplicaDescriptor>(m, "ReplicaDescriptor")
      .def_readonly("status", &ReplicaDescriptor::status)
      .def("is_memory_replica", [](const ReplicaDescriptor& d) { return d.memory; })
      .def("is_disk_replica", [](const ReplicaDescriptor& d) { return !d.memory; })
      .def("is_local_disk_replica", [](const ReplicaDescriptor&) { return false; })
      .def_readonly("node_id", &ReplicaDescriptor::node_id)
      .def_readonly("transport_endpoint", &ReplicaDescriptor::transport_endpoint)
      .def("__repr__", [](const ReplicaDescriptor& d) {
        return std::string("ReplicaDescriptor(") + (d.memory ? "memory" : "disk") + " on " +
               d.node_id + ")";
      });

  // Host memory for an engine's KV pool (SGLang's allocator_type "mooncake").
  py::class_<HostMemAllocator>(m, "MooncakeHostMemAllocator")
      .def(py::init<>())
      .def(
          "alloc",
          [](HostMemAllocator& a, int64_t size) {
            py::gil_scoped_release nogil;  // populating a large mapping takes a while
            return a.Alloc(size);
          },
          py::arg("size"), "The int address of `size` bytes of zeroed, shared host memory.")
      .def("free", &HostMemAllocator::Free, py::arg("ptr"),
           "Unmaps what alloc returned: 0, or -1 for an address alloc did not return.");

  py::class_<ReplicateConfig>(m, "ReplicateConfig")
      .def(py::init<>())
      .def(py::init([](int64_t replica_num, bool with_soft_pin,
                       std::vector<std::string> preferred_segments, std::string preferred_segment,
                       bool prefer_alloc_in_same_node) {
             ReplicateConfig c;
             c.replica_num = replica_num;
             c.with_soft_pin = with_soft_pin;
             c.preferred_segments = std::move(preferred_segments);
             c.preferred_segment = std::move(preferred_segment);
             c.prefer_alloc_in_same_node = prefer_alloc_in_same_node;
             return c;
           }),
           py::kw_only(), py::arg("replica_num") = 1, py::arg("with_soft_pin") = false,
           py::arg("preferred_segments") = std::vector<std::string>(),
           py::arg("preferred_segment") = "", py::arg("prefer_alloc_in_same_node") = false)
      .def_readwrite("replica_num", &ReplicateConfig::replica_num)
      .def_readwrite("nof_replica_num", &ReplicateConfig::nof_replica_num)
      .def_readwrite("dfs_replica_num", &ReplicateConfig::dfs_replica_num)
      .def_readwrite("with_soft_pin", &ReplicateConfig::with_soft_pin)
      .def_readwrite("preferred_segments", &ReplicateConfig::preferred_segments)
      .def_readwrite("preferred_nof_segments", &ReplicateConfig::preferred_nof_segments)
      .def_readwrite("preferred_segment", &ReplicateConfig::preferred_segment)
      .def_readwrite("prefer_alloc_in_same_node", &ReplicateConfig::prefer_alloc_in_same_node)
      .def_readwrite("group_ids", &ReplicateConfig::group_ids)
      .def_property(
          "soft_pin_action",
          [](const ReplicateConfig& c) { return mooncake::SoftPinAction(c.soft_pin_action); },
          [](ReplicateConfig& c, mooncake::SoftPinAction a) {
            c.soft_pin_action = static_cast<int>(a);
          })
      .def_readwrite("soft_pin_ttl_ms", &ReplicateConfig::soft_pin_ttl_ms)
      .def_readwrite("with_hard_pin", &ReplicateConfig::with_hard_pin)
      .def_property(
          "data_type",
          [](const ReplicateConfig& c) { return mooncake::ObjectDataType(c.data_type); },
          [](ReplicateConfig& c, mooncake::ObjectDataType t) { c.data_type = static_cast<int>(t); })
      .def("__str__", [](const ReplicateConfig& c) {
        return "ReplicateConfig: { replica_num: " + std::to_string(c.replica_num) +
               ", with_soft_pin: " + (c.with_soft_pin ? "true" : "false") +
               ", preferred_segment: " + c.preferred_segment + " }";
      });

  py::class_<ReadBuffer, std::shared_ptr<ReadBuffer>>(m, "BufferHandle", py::buffer_protocol())
      .def("ptr", [](const ReadBuffer& b) { return reinterpret_cast<uintptr_t>(b.bytes.data()); })
      .def("size", [](const ReadBuffer& b) { return b.bytes.size(); })
      .def("__len__", [](const ReadBuffer& b) { return b.bytes.size(); })
      .def_buffer([](ReadBuffer& b) {
        return py::buffer_info(b.bytes.data(), 1, py::format_descriptor<char>::format(), 1,
                               {b.bytes.size()}, {size_t{1}}, /*readonly=*/true);
      });

  auto not_supported = [](MooncakeStore&, const py::args&, const py::kwargs&) {
    return kMcNotSupported;
  };
  const ReplicateConfig kDefault;
  // MooncakeStore holds no Python: every call into it runs without the GIL
  // (the arguments are converted before, the results after).
  const py::call_guard<py::gil_scoped_release> kNoGil;
  py::class_<MooncakeStore>(m, "MooncakeDistributedStore")
      .def(py::init<>())
      .def(
          "setup",
          [](MooncakeStore& s, const std::string& local_hostname,
             const std::string& metadata_server, int64_t global_segment_size,
             int64_t local_buffer_size, const std::string& protocol,
             const std::string& rdma_devices, const std::string& master_server_addr,
             const py::object& engine, bool enable_ssd_offload, const std::string& ssd_offload_path,
             const std::string& tenant_id, bool enable_client_http_server,
             int64_t client_http_port) {
            (void)engine;  // Mooncake's TransferEngine: Shelf has its own transports
            SetupExtras extras;
            extras.enable_ssd_offload = enable_ssd_offload;
            extras.ssd_offload_path = ssd_offload_path;
            extras.tenant_id = tenant_id;
            extras.enable_client_http_server = enable_client_http_server;
            extras.client_http_port = client_http_port;
            py::gil_scoped_release nogil;
            return s.Setup(local_hostname, metadata_server, global_segment_size, local_buffer_size,
                           protocol, rdma_devices, master_server_addr, extras);
          },
          py::arg("local_hostname"), py::arg("metadata_server"),
          py::arg("global_segment_size") = kDefaultSegmentBytes,
          py::arg("local_buffer_size") = kDefaultSegmentBytes, py::arg("protocol") = "tcp",
          py::arg("rdma_devices") = "", py::arg("master_server_addr") = "127.0.0.1:50051",
          py::arg("engine") = py::none(), py::arg("enable_ssd_offload") = false,
          py::arg("ssd_offload_path") = "", py::arg("tenant_id") = "default",
          py::arg("enable_client_http_server") = false, py::arg("client_http_port") = 9300,
          "Connects to the Shelf master(s) named by master_server_addr (HOST:PORT, a "
          "list separated by ',' or ';', or etcd://HOST:PORT[;HOST:PORT][/CLUSTER]). "
          "Mooncake's engine and keywords are accepted (docs/mooncake-compat.md); "
          "tenant_id other than \"default\" must be the tenant of the principal in "
          "SHELF_CREDENTIALS. 0, or a negative code.")
      .def(
          "setup",
          [](MooncakeStore& s, const py::dict& config) {
            std::map<std::string, std::string> text = ConfigText(config);
            py::gil_scoped_release nogil;
            return s.SetupConfig(text);
          },
          py::arg("config"),
          "The dict form: Mooncake's JSON config keys (sizes as ints or \"16MB\"-style "
          "strings). 0, or a negative code.")
      .def("setup_dummy", &MooncakeStore::SetupDummy, py::arg("mem_pool_size"),
           py::arg("local_buffer_size"), py::arg("server_address"), kNoGil,
           "A client like any other; server_address names the Shelf master(s).")
      .def("close", &MooncakeStore::Close, kNoGil)
      .def("health_check", &MooncakeStore::HealthCheck, kNoGil)
      .def("get_hostname", &MooncakeStore::Hostname, kNoGil)
      .def(
          "put",
          [](MooncakeStore& s, const std::string& key, py::handle value,
             const ReplicateConfig& config) { return PutValue(s, key, value, config, false); },
          py::arg("key"), py::arg("value"), py::arg("config") = kDefault)
      .def("put_parts",
           [](MooncakeStore& s, const py::args& args, const py::kwargs& kwargs) {
             if (args.empty()) return mooncake::kMcInvalidParams;
             ReplicateConfig config;
             if (kwargs.contains("config")) config = kwargs["config"].cast<ReplicateConfig>();
             std::string key = args[0].cast<std::string>();
             std::string joined;
             for (size_t i = 1; i < args.size(); ++i) {
               BufferView v(args[i], /*writable=*/false);
               joined.append(v.data(), v.size());
             }
             py::gil_scoped_release nogil;
             return s.Put(key, joined.data(), joined.size(), config);
           })
      .def(
          "upsert",
          [](MooncakeStore& s, const std::string& key, py::handle value,
             const ReplicateConfig& config) { return PutValue(s, key, value, config, true); },
          py::arg("key"), py::arg("value"), py::arg("config") = kDefault)
      .def(
          "put_batch",
          [](MooncakeStore& s, const std::vector<std::string>& keys,
             const std::vector<py::object>& values, const ReplicateConfig& config) {
            std::vector<BufferView> views;
            std::vector<std::pair<const char*, size_t>> bytes;
            for (const py::object& v : values) {
              views.emplace_back(v, /*writable=*/false);
              bytes.emplace_back(views.back().data(), views.back().size());
            }
            py::gil_scoped_release nogil;
            return s.PutBatch(keys, bytes, config);
          },
          py::arg("keys"), py::arg("values"), py::arg("config") = kDefault)
      .def(
          "get",
          [](MooncakeStore& s, const std::string& key) {
            std::string value;
            return ReadValue(s, key, &value) ? ToBytes(value) : py::bytes();
          },
          py::arg("key"))
      .def(
          "get_batch",
          [](MooncakeStore& s, const std::vector<std::string>& keys) {
            std::vector<std::string> values;
            std::vector<Status> statuses;
            ReadValues(s, keys, &values, &statuses);
            py::list out;
            for (size_t i = 0; i < keys.size(); ++i) {
              out.append(statuses[i].ok() ? ToBytes(values[i]) : py::bytes());
            }
            return out;
          },
          py::arg("keys"))
      .def(
          "get_buffer",
          [](MooncakeStore& s, const std::string& key) -> py::object {
            auto buffer = std::make_shared<ReadBuffer>();
            if (!ReadValue(s, key, &buffer->bytes)) return py::none();
            return py::cast(buffer);
          },
          py::arg("key"))
      .def(
          "batch_get_buffer",
          [](MooncakeStore& s, const std::vector<std::string>& keys) {
            std::vector<std::string> values;
            std::vector<Status> statuses;
            ReadValues(s, keys, &values, &statuses);
            py::list out;
            for (size_t i = 0; i < keys.size(); ++i) {
              if (!statuses[i].ok()) {
                out.append(py::none());
                continue;
              }
              auto buffer = std::make_shared<ReadBuffer>();
              buffer->bytes = std::move(values[i]);
              out.append(py::cast(buffer));
            }
            return out;
          },
          py::arg("keys"))
      .def("is_exist", &MooncakeStore::IsExist, py::arg("key"), kNoGil)
      .def("batch_is_exist", &MooncakeStore::BatchIsExist, py::arg("keys"), kNoGil)
      .def("remove", &MooncakeStore::Remove, py::arg("key"), py::arg("force") = false, kNoGil)
      .def("batch_remove", &MooncakeStore::BatchRemove, py::arg("keys"), py::arg("force") = false,
           kNoGil)
      .def("batch_get_replica_desc", &MooncakeStore::BatchGetReplicaDesc, py::arg("keys"), kNoGil,
           "Per key present: one ReplicaDescriptor per store holding it; keys not found "
           "are left out.")
      .def("get_size", &MooncakeStore::GetSize, py::arg("key"), kNoGil)
      .def(
          "remove_all",
          [](MooncakeStore& s, bool force) { return s.RemoveMatching("", false, force); },
          py::arg("force") = false, kNoGil,
          "Removes every key, pinned ones too (pins shape eviction only, as in Mooncake); "
          "the count removed.")
      .def(
          "remove_by_regex",
          [](MooncakeStore& s, const std::string& regex_pattern, bool force) {
            return s.RemoveMatching(regex_pattern, true, force);
          },
          py::arg("regex_pattern"), py::arg("force") = false, kNoGil,
          "Removes the keys in which the regex (RE2 syntax) is found, pinned ones too; the "
          "count removed.")
      .def("register_buffer", &MooncakeStore::RegisterBuffer, py::arg("buffer_ptr"),
           py::arg("size"), kNoGil)
      .def("unregister_buffer", &MooncakeStore::UnregisterBuffer, py::arg("buffer_ptr"), kNoGil)
      .def("get_into", &MooncakeStore::GetInto, py::arg("key"), py::arg("buffer_ptr"),
           py::arg("size"), kNoGil)
      .def("batch_get_into", &MooncakeStore::BatchGetInto, py::arg("keys"), py::arg("buffer_ptrs"),
           py::arg("sizes"), kNoGil)
      .def("put_from", &MooncakeStore::PutFrom, py::arg("key"), py::arg("buffer_ptr"),
           py::arg("size"), py::arg("config") = kDefault, kNoGil)
      .def("batch_put_from", &MooncakeStore::BatchPutFrom, py::arg("keys"), py::arg("buffer_ptrs"),
           py::arg("sizes"), py::arg("config") = kDefault, kNoGil)
      .def("batch_put_from_multi_buffers", &MooncakeStore::BatchPutFromMulti, py::arg("keys"),
           py::arg("all_buffer_ptrs"), py::arg("all_sizes"), py::arg("config") = kDefault, kNoGil)
      .def(
          "batch_get_into_multi_buffers",
          [](MooncakeStore& s, const std::vector<std::string>& keys,
             const std::vector<std::vector<uint64_t>>& ptrs,
             const std::vector<std::vector<int64_t>>& sizes, bool prefer_alloc_in_same_node) {
            (void)prefer_alloc_in_same_node;  // reads pick the nearest replica anyway
            return s.BatchGetIntoMulti(keys, ptrs, sizes);
          },
          py::arg("keys"), py::arg("all_buffer_ptrs"), py::arg("all_sizes"),
          py::arg("prefer_alloc_in_same_node") = false, kNoGil)
      .def("get_into_ranges", &MooncakeStore::GetIntoRanges, py::arg("buffer_ptrs"),
           py::arg("all_keys"), py::arg("all_dst_offsets"), py::arg("all_src_offsets"),
           py::arg("all_sizes"), kNoGil,
           "Copies byte ranges of blocks into registered buffers; per range the bytes "
           "copied or a negative code.")
      // Not supported: NOT_SUPPORTED (-1012), whatever the arguments.
      .def("init_all", not_supported)
      .def("put_from_with_metadata", not_supported)
      .def("put_tensor", not_supported)
      .def("pub_tensor", not_supported);
}

}  // namespace shelf::python
