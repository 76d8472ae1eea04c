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

#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/python/module.h"
#include "shelf/client.h"
#include "shelf/keys.h"

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
      .def(py::init(&PyClient::Create), py::arg("masters"), py::kw_only(), py::arg("secret") = "",
           py::arg("timeout_ms") = 5000, py::arg("allow_tcp") = true, py::arg("allow_shm") = true,
           py::arg("verify_checksums") = true, py::arg("tls_ca") = "",
           py::arg("transfer_threads") = 8, py::arg("async_threads") = 4,
           py::arg("async_queue_max") = 256, py::arg("tcp_streams_per_block") = 4,
           py::arg("rdma_device") = "", py::arg("rdma_port") = 1, py::arg("rdma_gid_index") = -1,
           py::arg("rdma_traffic_class") = 0, py::arg("rdma_service_level") = 0,
           py::arg("rdma_pkey_index") = 0, py::arg("tls_cert") = "", py::arg("tls_key") = "",
           py::arg("etcd_ca") = "", py::arg("etcd_cert") = "", py::arg("etcd_key") = "",
           py::arg("etcd_user_file") = "", py::arg("shm_store_uid") = -1, py::arg("principal") = "",
           py::arg("principal_secret") = "", py::arg("credentials") = "",
           py::arg("rdma_store_pull_puts") = false, py::arg("rdma_connections_max") = 256,
           py::arg("rdma_gpu_registrations_max") = 64, py::arg("data_tls") = false,
           py::arg("data_tls_ca") = "", py::arg("data_tls_cert") = "", py::arg("data_tls_key") = "",
           py::arg("session_tag_payload") = false,
           py::arg("warm_shm_bytes") = ClientOptions().warm_shm_bytes,
           py::arg("master_call_streams") = ClientOptions().master_call_streams)
      .def("put", &PyClient::Put, py::arg("key"), py::arg("value"), py::kw_only(),
           py::arg("replicas") = 1, py::arg("best_effort") = false, py::arg("prefer_local") = false,
           py::arg("spread_label") = "", py::arg("timeout_ms") = 0,
           py::arg("parent_key") = py::none(), py::arg("engine_hash") = py::none(),
           py::arg("engine_parent_hash") = py::none(), py::arg("block_tokens") = 0,
           py::arg("token_ids") = std::vector<uint32_t>(), py::arg("model") = "",
           "Stores `value` (any bytes-like object). Succeeds also when the key exists. "
           "parent_key, engine_hash, engine_parent_hash, block_tokens, token_ids and model are "
           "what the master's KV event stream reports for the block (docs/events.md).")
      .def("list_keys", &PyClient::ListKeys, py::arg("pattern") = py::bytes(""), py::kw_only(),
           py::arg("cursor") = py::bytes(""), py::arg("count") = 1024, py::arg("timeout_ms") = 0,
           "One page of the keys matching `pattern` (glob; b'' for all) after `cursor`: "
           "(keys, next_cursor), next_cursor b'' on the last page.")
      .def("get", &PyClient::Get, py::arg("key"), py::kw_only(), py::arg("timeout_ms") = 0,
           "The block as bytes, or None on a miss.")
      .def("get_into", &PyClient::GetInto, py::arg("key"), py::arg("target"), py::kw_only(),
           py::arg("offset") = 0, py::arg("capacity") = py::none(), py::arg("timeout_ms") = 0,
           py::arg("stream") = py::none(), py::arg("event") = py::none(),
           "Reads the block straight into `target` (a writable buffer: bytearray, memoryview, "
           "numpy array; or a BufferHandle) at `offset`; returns its size, or None on a miss. "
           "OutOfRangeError when it does not fit. For a GPU BufferHandle, `stream` and `event` "
           "(CUDA handles as ints) order the copy with the caller's stream: it follows the "
           "stream's earlier work, `event` is recorded after it, later work on `stream` waits "
           "for it, and the call returns once the copy is enqueued.")
      .def("put_from", &PyClient::PutFrom, py::arg("key"), py::arg("source"), py::kw_only(),
           py::arg("offset") = 0, py::arg("size") = py::none(), py::arg("replicas") = 1,
           py::arg("best_effort") = false, py::arg("prefer_local") = false,
           py::arg("spread_label") = "", py::arg("timeout_ms") = 0, py::arg("stream") = py::none(),
           py::arg("event") = py::none(),
           "Stores bytes [offset, offset+size) of `source` (a buffer or a BufferHandle) "
           "without copying them first. For a GPU BufferHandle, the copy out of device memory "
           "waits for the work enqueued on `stream` before the call and for `event` (CUDA "
           "handles as ints; stream 0 is the legacy default stream); without them the caller "
           "must have synchronized its writes.")
      .def("exists", &PyClient::Exists, py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
           "For one key: bool. For a sequence: list of bools.")
      .def("remove", &PyClient::Remove, py::arg("key"), py::kw_only(), py::arg("timeout_ms") = 0,
           "True when removed, False when absent. FailedPreconditionError if pinned.")
      .def("batch_remove", &PyClient::BatchRemove, py::arg("keys"), py::kw_only(),
           py::arg("timeout_ms") = 0, py::arg("return_statuses") = false,
           "Removes 1..1024 keys in one master round trip: a list of bools, True where removed "
           "(False: absent or pinned); with return_statuses=True, (removed, statuses).")
      .def("match_prefix", &PyClient::MatchPrefix, py::arg("keys"), py::kw_only(),
           py::arg("timeout_ms") = 0,
           "The number of leading keys present (read leases taken on them).")
      .def("locate", &PyClient::Locate, py::arg("keys"), py::kw_only(), py::arg("timeout_ms") = 0,
           "Where the chain of keys lives: {'cluster_blocks': n, 'nodes': [{'node_id', "
           "'data_address', 'host_id', 'blocks', 'dram_blocks', 'tiers': ['dram'|'ssd', ...]}]}, "
           "longest run first. No lease, no LRU move.")
      .def("batch_get", &PyClient::BatchGet, py::arg("keys"), py::kw_only(),
           py::arg("timeout_ms") = 0, py::arg("return_statuses") = false,
           "A list of bytes, None where the block is missing or unreadable; with "
           "return_statuses=True, (values, statuses).")
      .def("batch_get_into", &PyClient::BatchGetInto, py::arg("keys"), py::arg("targets"),
           py::kw_only(), py::arg("timeout_ms") = 0, py::arg("return_statuses") = false,
           "Reads block i into targets[i]; a list of sizes, None where missing or unreadable.")
      .def("batch_put", &PyClient::BatchPut, py::arg("keys"), py::arg("values"), py::kw_only(),
           py::arg("replicas") = 1, py::arg("best_effort") = false, py::arg("prefer_local") = false,
           py::arg("spread_label") = "", py::arg("timeout_ms") = 0, py::arg("blocks") = py::none(),
           "Stores values[i] under keys[i]; one Status per item. blocks[i], a dict with put's "
           "event keywords (parent_key, engine_hash, engine_parent_hash, block_tokens, "
           "token_ids, model) or None, is what the KV event stream reports for item i.")
      .def("batch_get_async", &PyClient::BatchGetAsync, py::arg("keys"), py::kw_only(),
           py::arg("timeout_ms") = 0,
           "Starts batch_get on the client's async threads; returns a Future.")
      .def("batch_put_async", &PyClient::BatchPutAsync, py::arg("keys"), py::arg("values"),
           py::kw_only(), py::arg("replicas") = 1, py::arg("timeout_ms") = 0,
           "Starts batch_put; the values stay referenced (and must not change) until done.")
      .def("batch_get_into_async", &PyClient::BatchGetIntoAsync, py::arg("keys"), py::arg("buffer"),
           py::arg("offsets"), py::arg("capacity"), py::kw_only(), py::arg("timeout_ms") = 0,
           py::arg("stream") = py::none(), py::arg("event") = py::none(),
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
      .def("stats", &PyClient::Stats)
      .def("close", &PyClient::Close,
           "Later calls raise FailedPreconditionError; calls in progress finish.")
      .def("__enter__", [](std::shared_ptr<PyClient> c) { return c; })
      .def("__exit__", [](PyClient& c, const py::args&) {
        c.Close();
        return false;
      });

  BindStorageAdapter(m);
  BindMooncake(m);
  BindLmcache(m);
}
