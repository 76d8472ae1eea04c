// The `shelf` Python module: libshelf for Python engines (pybind11). Built
// as the extension `shelf._shelf`; the package `shelf` (python/shelf/
// __init__.py) re-exports it.
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
#include "client/python/module.h"
#include "shelf/client.h"
#include "shelf/keys.h"

namespace shelf::python {
namespace {

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

// The GpuSync of a call from its `stream` and `event` arguments: CUDA
// handles as ints (torch: torch.cuda.current_stream().cuda_stream,
// torch.cuda.Event().cuda_event), None when not given. Stream 0 is the
// legacy default stream (what torch reports for it), passed to CUDA as
// cudaStreamLegacy, since a null handle means "no stream" to libshelf.
GpuSync MakeGpuSync(std::optional<uintptr_t> stream, std::optional<uintptr_t> event) {
  constexpr uintptr_t kCudaStreamLegacy = 0x1;  // cudaStreamLegacy in driver_types.h
  GpuSync sync;
  if (stream) sync.stream = reinterpret_cast<void*>(*stream == 0 ? kCudaStreamLegacy : *stream);
  if (event) {
    if (*event == 0) throw py::value_error("event=0 is not a CUDA event");
    sync.event = reinterpret_cast<void*>(*event);
  }
  return sync;
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

}  // namespace
}  // namespace shelf::python

PYBIND11_MODULE(_shelf, m) {
  using namespace shelf;          // NOLINT: the module body names every type
  using namespace shelf::python;  // NOLINT
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

  BindKeys(m);

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
          py::init(
              [](py::object masters, const std::string& secret, uint64_t timeout_ms, bool allow_tcp,
                 bool allow_shm, bool verify_checksums, const std::string& tls_ca,
                 uint32_t transfer_threads, uint32_t async_threads, uint32_t async_queue_max,
                 uint32_t tcp_streams_per_block, const std::string& rdma_device, uint32_t rdma_port,
                 int32_t rdma_gid_index, uint32_t rdma_traffic_class, uint32_t rdma_service_level,
                 uint32_t rdma_pkey_index, const std::string& tls_cert, const std::string& tls_key,
                 const std::string& etcd_ca, const std::string& etcd_cert,
                 const std::string& etcd_key, const std::string& etcd_user_file) {
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
                o.tls_cert = tls_cert;
                o.tls_key = tls_key;
                o.etcd_ca = etcd_ca;
                o.etcd_cert = etcd_cert;
                o.etcd_key = etcd_key;
                o.etcd_user_file = etcd_user_file;
                o.transfer_threads = transfer_threads;
                o.async_threads = async_threads;
                o.async_queue_max = async_queue_max;
                o.tcp_streams_per_block = tcp_streams_per_block;
                o.rdma_device = rdma_device;
                o.rdma_port = rdma_port;
                o.rdma_gid_index = rdma_gid_index;
                o.rdma_traffic_class = rdma_traffic_class;
                o.rdma_service_level = rdma_service_level;
                o.rdma_pkey_index = rdma_pkey_index;
                return std::make_shared<PyClient>(o);
              }),
          py::arg("masters"), py::kw_only(), py::arg("secret") = "", py::arg("timeout_ms") = 5000,
          py::arg("allow_tcp") = true, py::arg("allow_shm") = true,
          py::arg("verify_checksums") = true, py::arg("tls_ca") = "",
          py::arg("transfer_threads") = 8, py::arg("async_threads") = 4,
          py::arg("async_queue_max") = 256, py::arg("tcp_streams_per_block") = 4,
          py::arg("rdma_device") = "", py::arg("rdma_port") = 1, py::arg("rdma_gid_index") = -1,
          py::arg("rdma_traffic_class") = 0, py::arg("rdma_service_level") = 0,
          py::arg("rdma_pkey_index") = 0, py::arg("tls_cert") = "", py::arg("tls_key") = "",
          py::arg("etcd_ca") = "", py::arg("etcd_cert") = "", py::arg("etcd_key") = "",
          py::arg("etcd_user_file") = "")
      .def(
          "put",
          [](PyClient& c, py::handle key, py::handle value, uint32_t replicas, bool best_effort,
             bool prefer_local, const std::string& spread_label, int64_t timeout_ms,
             py::handle parent_key, std::optional<uint64_t> engine_hash,
             std::optional<uint64_t> engine_parent_hash, uint32_t block_tokens,
             std::vector<uint32_t> token_ids) {
            std::string k = ToKey(key);
            BufferView v(value, /*writable=*/false);
            PutOptions po =
                MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
            if (!parent_key.is_none()) po.block.parent_key = ToKey(parent_key);
            po.block.has_engine_hash = engine_hash.has_value();
            po.block.engine_hash = engine_hash.value_or(0);
            po.block.has_engine_parent_hash = engine_parent_hash.has_value();
            po.block.engine_parent_hash = engine_parent_hash.value_or(0);
            po.block.block_tokens = block_tokens;
            po.block.token_ids = std::move(token_ids);
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
          py::arg("parent_key") = py::none(), py::arg("engine_hash") = py::none(),
          py::arg("engine_parent_hash") = py::none(), py::arg("block_tokens") = 0,
          py::arg("token_ids") = std::vector<uint32_t>(),
          "Stores `value` (any bytes-like object). Succeeds also when the key exists. "
          "parent_key, engine_hash, engine_parent_hash, block_tokens and token_ids are what "
          "the master's KV event stream reports for the block (docs/events.md).")
      .def(
          "list_keys",
          [](PyClient& c, py::bytes pattern, py::bytes cursor, size_t count, int64_t timeout_ms) {
            std::vector<std::string> keys;
            std::string next;
            Status s;
            {
              std::string p = pattern, cur = cursor;
              py::gil_scoped_release nogil;
              s = c.get()->ListKeys(cur, p, count, &keys, &next, false, ToDeadline(timeout_ms));
            }
            Check(s);
            py::list out;
            for (const std::string& k : keys) out.append(py::bytes(k));
            return py::make_tuple(out, py::bytes(next));
          },
          py::arg("pattern") = py::bytes(""), py::kw_only(), py::arg("cursor") = py::bytes(""),
          py::arg("count") = 1024, py::arg("timeout_ms") = 0,
          "One page of the keys matching `pattern` (glob; b'' for all) after `cursor`: "
          "(keys, next_cursor), next_cursor b'' on the last page.")
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
             std::optional<size_t> capacity, int64_t timeout_ms, std::optional<uintptr_t> stream,
             std::optional<uintptr_t> event) -> py::object {
            std::string k = ToKey(key);
            GpuSync sync = MakeGpuSync(stream, event);
            size_t size = 0;
            Status s;
            if (py::isinstance<PyBufferHandle>(target)) {
              PyBufferHandle h = target.cast<PyBufferHandle>();
              size_t cap = capacity ? *capacity : (offset <= h.size ? h.size - offset : 0);
              py::gil_scoped_release nogil;
              s = c.get()->GetInto(k, h.handle, offset, cap, &size, ToDeadline(timeout_ms), sync);
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
          py::arg("stream") = py::none(), py::arg("event") = py::none(),
          "Reads the block straight into `target` (a writable buffer: bytearray, memoryview, "
          "numpy array; or a BufferHandle) at `offset`; returns its size, or None on a miss. "
          "OutOfRangeError when it does not fit. For a GPU BufferHandle, `stream` and `event` "
          "(CUDA handles as ints) order the copy with the caller's stream: it follows the "
          "stream's earlier work, `event` is recorded after it, later work on `stream` waits "
          "for it, and the call returns once the copy is enqueued.")
      .def(
          "put_from",
          [](PyClient& c, py::handle key, py::handle source, size_t offset,
             std::optional<size_t> size, uint32_t replicas, bool best_effort, bool prefer_local,
             const std::string& spread_label, int64_t timeout_ms, std::optional<uintptr_t> stream,
             std::optional<uintptr_t> event) {
            std::string k = ToKey(key);
            PutOptions po =
                MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
            po.gpu = MakeGpuSync(stream, event);
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
          py::arg("stream") = py::none(), py::arg("event") = py::none(),
          "Stores bytes [offset, offset+size) of `source` (a buffer or a BufferHandle) "
          "without copying them first. For a GPU BufferHandle, the copy out of device memory "
          "waits for the work enqueued on `stream` before the call and for `event` (CUDA "
          "handles as ints; stream 0 is the legacy default stream); without them the caller "
          "must have synchronized its writes.")
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
          "batch_remove",
          [](PyClient& c, py::handle keys, int64_t timeout_ms, bool return_statuses) -> py::object {
            std::vector<std::string> k = ToKeys(keys);
            std::vector<Status> st;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->BatchRemove(k, &st, ToDeadline(timeout_ms));
            }
            Check(s);
            py::list out;
            for (const Status& one : st) out.append(py::bool_(one.ok()));
            if (return_statuses) return py::make_tuple(out, StatusList(st));
            return out;
          },
          py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
          py::arg("return_statuses") = false,
          "Removes 1..1024 keys in one master round trip: a list of bools, True where removed "
          "(False: absent or pinned); with return_statuses=True, (removed, statuses).")
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
          "locate",
          [](PyClient& c, py::handle keys, int64_t timeout_ms) {
            std::vector<std::string> k = ToKeys(keys);
            std::vector<NodeRun> nodes;
            size_t cluster_blocks = 0;
            Status s;
            {
              py::gil_scoped_release nogil;
              s = c.get()->Locate(k, &nodes, &cluster_blocks, ToDeadline(timeout_ms));
            }
            Check(s);
            py::list out;
            for (const NodeRun& n : nodes) {
              py::list tiers;
              for (Tier t : n.tiers) tiers.append(t == Tier::kDram ? "dram" : "ssd");
              py::dict d;
              d["node_id"] = n.node_id;
              d["data_address"] = n.data_address;
              d["host_id"] = n.host_id;
              d["blocks"] = n.blocks;
              d["dram_blocks"] = n.dram_blocks;
              d["tiers"] = tiers;
              out.append(d);
            }
            py::dict result;
            result["cluster_blocks"] = cluster_blocks;
            result["nodes"] = out;
            return result;
          },
          py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
          "Where the chain of keys lives: {'cluster_blocks': n, 'nodes': [{'node_id', "
          "'data_address', 'host_id', 'blocks', 'dram_blocks', 'tiers': ['dram'|'ssd', ...]}]}, "
          "longest run first. No lease, no LRU move.")
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
             size_t capacity, int64_t timeout_ms, std::optional<uintptr_t> stream,
             std::optional<uintptr_t> event) {
            std::vector<std::string> k = ToKeys(keys);
            GpuSync sync = MakeGpuSync(stream, event);
            PyBufferHandle h = handle.cast<PyBufferHandle>();
            if (offsets.size() != k.size()) throw py::value_error("one offset per key");
            std::vector<GetIntoItem> items;
            for (size_t i = 0; i < k.size(); ++i) {
              items.push_back(GetIntoItem{k[i], h.handle, offsets[i], capacity});
            }
            BatchFuture f =
                c.get()->BatchGetIntoAsync(std::move(items), ToDeadline(timeout_ms), sync);
            return std::make_unique<PyFuture>(PyFuture::Kind::kGetInto, std::move(f),
                                              std::vector<BufferView>(), py::list());
          },
          py::arg("keys"), py::arg("buffer"), py::arg("offsets"), py::arg("capacity"),
          py::kw_only(), py::arg("timeout_ms") = 0, py::arg("stream") = py::none(),
          py::arg("event") = py::none(),
          "Starts reading block i into [offsets[i], offsets[i]+capacity) of a registered "
          "buffer; returns a Future whose result() is the sizes. `stream` and `event` as for "
          "get_into, set up when the batch runs: enqueue work that reads the blocks after "
          "the Future is done.")
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

  BindStorageAdapter(m);
  BindMooncake(m);
}
