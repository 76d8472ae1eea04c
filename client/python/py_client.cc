// The methods of shelf.Client (PyClient, client/python/module.h) that the
// module binds by member pointer: each converts its Python arguments, calls
// libshelf without the GIL, and converts the result. The names, arguments,
// defaults and docstrings Python sees are in shelf_module.cc.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "client/memory_batch.h"
#include "client/python/module.h"
#include "shelf/client.h"

namespace shelf::python {
namespace {

PutOptions MakePutOptions(uint32_t replicas, bool best_effort, bool prefer_local,
                          const std::string& spread_label, int64_t timeout_ms) {
  PutOptions po;
  po.replicas = replicas;
  po.best_effort = best_effort;
  po.prefer_local = prefer_local;
  po.spread_label = spread_label;
  po.deadline = Deadline::FromTimeoutMs(timeout_ms);
  return po;
}

// A batch item's event info from its dict (the keywords of put: parent_key,
// engine_hash, engine_parent_hash, block_tokens, token_ids, model); None
// says nothing. An unknown key raises, so a typo is not silently dropped.
BlockEventInfo BlockFromDict(py::handle d) {
  BlockEventInfo b;
  if (d.is_none()) return b;
  if (!py::isinstance<py::dict>(d)) throw py::type_error("blocks[i]: a dict or None");
  for (auto [key, value] : py::reinterpret_borrow<py::dict>(d)) {
    std::string k = py::str(key);
    if (k == "parent_key") {
      b.parent_key = ToKey(value);
    } else if (k == "engine_hash") {
      b.has_engine_hash = true;
      b.engine_hash = value.cast<uint64_t>();
    } else if (k == "engine_parent_hash") {
      b.has_engine_parent_hash = true;
      b.engine_parent_hash = value.cast<uint64_t>();
    } else if (k == "block_tokens") {
      b.block_tokens = value.cast<uint32_t>();
    } else if (k == "token_ids") {
      b.token_ids = value.cast<std::vector<uint32_t>>();
    } else if (k == "model") {
      b.model = value.cast<std::string>();
    } else {
      throw py::value_error("blocks[i]: unknown key '" + k +
                            "' (parent_key, engine_hash, engine_parent_hash, block_tokens, "
                            "token_ids, model)");
    }
  }
  return b;
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

// The bytes [offset, offset + length) of a buffer of `size` bytes, length
// defaulting to the rest: OutOfRange (raised) when they do not fit.
// `what` names the length in the error ("capacity", "size").
size_t RangeLength(size_t size, size_t offset, std::optional<size_t> length, const char* what) {
  if (offset > size) {
    Raise(Status(StatusCode::kOutOfRange, "offset " + std::to_string(offset) +
                                              " is past the end of the buffer of " +
                                              std::to_string(size) + " bytes"));
  }
  size_t n = length ? *length : size - offset;
  if (n > size - offset) {
    Raise(Status(StatusCode::kOutOfRange, std::string(what) + " runs past the buffer's end"));
  }
  return n;
}

}  // namespace

std::shared_ptr<PyClient> PyClient::Create(
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
    uint64_t warm_shm_bytes, uint32_t master_call_streams) {
  ClientOptions o;
  if (py::isinstance<py::str>(masters)) {
    o.masters = SplitMasters(masters.cast<std::string>());
  } else {
    o.masters = masters.cast<std::vector<std::string>>();
  }
  o.secret = secret;
  o.principal = principal;
  o.principal_secret = principal_secret;
  o.credentials_file = credentials;
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
  o.shm_store_uid = shm_store_uid;
  o.data_tls = data_tls;
  o.data_tls_ca = data_tls_ca;
  o.data_tls_cert = data_tls_cert;
  o.data_tls_key = data_tls_key;
  o.session_tag_payload = session_tag_payload;
  o.warm_shm_bytes = warm_shm_bytes;
  o.master_call_streams = master_call_streams;
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
  o.rdma_store_pull_puts = rdma_store_pull_puts;
  o.rdma_connections_max = rdma_connections_max;
  o.rdma_gpu_registrations_max = rdma_gpu_registrations_max;
  return std::make_shared<PyClient>(o);
}

void PyClient::Put(py::handle key, py::handle value, uint32_t replicas, bool best_effort,
                   bool prefer_local, const std::string& spread_label, int64_t timeout_ms,
                   py::handle parent_key, std::optional<uint64_t> engine_hash,
                   std::optional<uint64_t> engine_parent_hash, uint32_t block_tokens,
                   std::vector<uint32_t> token_ids, const std::string& model) {
  std::string k = ToKey(key);
  BufferView v(value, /*writable=*/false);
  PutOptions po = MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
  if (!parent_key.is_none()) po.block.parent_key = ToKey(parent_key);
  po.block.has_engine_hash = engine_hash.has_value();
  po.block.engine_hash = engine_hash.value_or(0);
  po.block.has_engine_parent_hash = engine_parent_hash.has_value();
  po.block.engine_parent_hash = engine_parent_hash.value_or(0);
  po.block.block_tokens = block_tokens;
  po.block.token_ids = std::move(token_ids);
  po.block.model = model;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->Put(k, v.data(), v.size(), po);
  }
  Check(s);
}

py::tuple PyClient::ListKeys(const py::bytes& pattern, const py::bytes& cursor, size_t count,
                             int64_t timeout_ms) {
  std::vector<std::string> keys;
  std::string next;
  Status s;
  {
    std::string p = pattern, cur = cursor;
    py::gil_scoped_release nogil;
    s = get()->ListKeys(cur, p, count, &keys, &next, false, Deadline::FromTimeoutMs(timeout_ms));
  }
  Check(s);
  py::list out;
  for (const std::string& k : keys) out.append(py::bytes(k));
  return py::make_tuple(out, py::bytes(next));
}

py::object PyClient::Get(py::handle key, int64_t timeout_ms) {
  std::string k = ToKey(key);
  std::string value;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->Get(k, &value, Deadline::FromTimeoutMs(timeout_ms));
  }
  if (s.code() == StatusCode::kNotFound) return py::none();
  Check(s);
  return ToBytes(value);
}

py::object PyClient::GetInto(py::handle key, py::handle target, size_t offset,
                             std::optional<size_t> capacity, int64_t timeout_ms,
                             std::optional<uintptr_t> stream, std::optional<uintptr_t> event) {
  std::string k = ToKey(key);
  GpuSync sync = MakeGpuSync(stream, event);
  size_t size = 0;
  Status s;
  if (py::isinstance<PyBufferHandle>(target)) {
    PyBufferHandle h = target.cast<PyBufferHandle>();
    size_t cap = capacity ? *capacity : (offset <= h.size ? h.size - offset : 0);
    py::gil_scoped_release nogil;
    s = get()->GetInto(k, h.handle, offset, cap, &size, Deadline::FromTimeoutMs(timeout_ms), sync);
  } else {
    BufferView v(target, /*writable=*/true);
    size_t cap = RangeLength(v.size(), offset, capacity, "capacity");
    py::gil_scoped_release nogil;
    s = get()->GetInto(k, v.data() + offset, cap, &size, Deadline::FromTimeoutMs(timeout_ms));
  }
  if (s.code() == StatusCode::kNotFound) return py::none();
  Check(s);
  return py::int_(size);
}

void PyClient::PutFrom(py::handle key, py::handle source, size_t offset, std::optional<size_t> size,
                       uint32_t replicas, bool best_effort, bool prefer_local,
                       const std::string& spread_label, int64_t timeout_ms,
                       std::optional<uintptr_t> stream, std::optional<uintptr_t> event) {
  std::string k = ToKey(key);
  PutOptions po = MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
  po.gpu = MakeGpuSync(stream, event);
  Status s;
  if (py::isinstance<PyBufferHandle>(source)) {
    PyBufferHandle h = source.cast<PyBufferHandle>();
    size_t n = size ? *size : (offset <= h.size ? h.size - offset : 0);
    py::gil_scoped_release nogil;
    s = get()->PutFrom(k, h.handle, offset, n, po);
  } else {
    BufferView v(source, /*writable=*/false);
    size_t n = RangeLength(v.size(), offset, size, "size");
    py::gil_scoped_release nogil;
    s = get()->Put(k, v.data() + offset, n, po);
  }
  Check(s);
}

py::object PyClient::Exists(py::handle keys, int64_t timeout_ms) {
  bool single = PyBytes_Check(keys.ptr()) || PyUnicode_Check(keys.ptr());
  std::vector<std::string> k = single ? std::vector<std::string>{ToKey(keys)} : ToKeys(keys);
  std::vector<bool> present;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->Exists(k, &present, Deadline::FromTimeoutMs(timeout_ms));
  }
  Check(s);
  if (single) return py::bool_(present[0]);
  return py::cast(present);
}

bool PyClient::Remove(py::handle key, int64_t timeout_ms) {
  std::string k = ToKey(key);
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->Remove(k, Deadline::FromTimeoutMs(timeout_ms));
  }
  if (s.code() == StatusCode::kNotFound) return false;
  Check(s);
  return true;
}

py::object PyClient::BatchRemove(py::handle keys, int64_t timeout_ms, bool return_statuses) {
  std::vector<std::string> k = ToKeys(keys);
  std::vector<Status> st;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->BatchRemove(k, &st, Deadline::FromTimeoutMs(timeout_ms));
  }
  Check(s);
  py::list out;
  for (const Status& one : st) out.append(py::bool_(one.ok()));
  if (return_statuses) return py::make_tuple(out, StatusList(st));
  return out;
}

size_t PyClient::MatchPrefix(py::handle keys, int64_t timeout_ms) {
  std::vector<std::string> k = ToKeys(keys);
  size_t matched = 0;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->MatchPrefix(k, &matched, Deadline::FromTimeoutMs(timeout_ms));
  }
  Check(s);
  return matched;
}

py::dict PyClient::Locate(py::handle keys, int64_t timeout_ms) {
  std::vector<std::string> k = ToKeys(keys);
  std::vector<NodeRun> nodes;
  size_t cluster_blocks = 0;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->Locate(k, &nodes, &cluster_blocks, Deadline::FromTimeoutMs(timeout_ms));
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
}

py::object PyClient::BatchGet(py::handle keys, int64_t timeout_ms, bool return_statuses) {
  std::vector<std::string> k = ToKeys(keys);
  std::vector<std::string> values;
  std::vector<Status> st;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->BatchGet(k, &values, &st, Deadline::FromTimeoutMs(timeout_ms));
  }
  Check(s);
  py::list out;
  for (size_t i = 0; i < k.size(); ++i) {
    out.append(st[i].ok() ? py::object(ToBytes(values[i])) : py::none());
  }
  if (return_statuses) return py::make_tuple(out, StatusList(st));
  return out;
}

py::object PyClient::BatchGetInto(py::handle keys, py::handle targets, int64_t timeout_ms,
                                  bool return_statuses) {
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
    s = BatchGetIntoMemory(get(), k, ptrs, caps, Deadline::FromTimeoutMs(timeout_ms), &st, &sizes);
  }
  Check(s);
  py::list out;
  for (size_t i = 0; i < k.size(); ++i) {
    out.append(st[i].ok() ? py::object(py::int_(sizes[i])) : py::none());
  }
  if (return_statuses) return py::make_tuple(out, StatusList(st));
  return out;
}

py::list PyClient::BatchPut(py::handle keys, py::handle values, uint32_t replicas, bool best_effort,
                            bool prefer_local, const std::string& spread_label, int64_t timeout_ms,
                            py::handle blocks) {
  std::vector<std::string> k = ToKeys(keys);
  std::vector<BufferView> views;
  for (py::handle v : py::iter(values)) views.emplace_back(v, /*writable=*/false);
  if (views.size() != k.size()) throw py::value_error("one value per key");
  std::vector<PutItem> items;
  for (size_t i = 0; i < k.size(); ++i) {
    items.push_back(PutItem{k[i], views[i].data(), views[i].size()});
  }
  if (!blocks.is_none()) {
    size_t i = 0;
    for (py::handle b : py::iter(blocks)) {
      if (i == items.size()) throw py::value_error("blocks: at most one per key");
      items[i++].block = BlockFromDict(b);
    }
    if (i != items.size()) throw py::value_error("blocks: one per key (None for none)");
  }
  PutOptions po = MakePutOptions(replicas, best_effort, prefer_local, spread_label, timeout_ms);
  std::vector<Status> st;
  Status s;
  {
    py::gil_scoped_release nogil;
    s = get()->BatchPut(items, &st, po);
  }
  Check(s);
  return StatusList(st);
}

std::unique_ptr<PyFuture> PyClient::BatchGetAsync(py::handle keys, int64_t timeout_ms) {
  std::vector<std::string> k = ToKeys(keys);
  BatchFuture f = get()->BatchGetAsync(std::move(k), Deadline::FromTimeoutMs(timeout_ms));
  return std::make_unique<PyFuture>(PyFuture::Kind::kGet, std::move(f), std::vector<BufferView>(),
                                    py::list());
}

std::unique_ptr<PyFuture> PyClient::BatchPutAsync(py::handle keys, py::handle values,
                                                  uint32_t replicas, int64_t timeout_ms) {
  std::vector<std::string> k = ToKeys(keys);
  std::vector<BufferView> views;
  for (py::handle v : py::iter(values)) views.emplace_back(v, /*writable=*/false);
  if (views.size() != k.size()) throw py::value_error("one value per key");
  std::vector<PutItem> items;
  for (size_t i = 0; i < k.size(); ++i) {
    items.push_back(PutItem{k[i], views[i].data(), views[i].size()});
  }
  PutOptions po = MakePutOptions(replicas, false, false, "", timeout_ms);
  BatchFuture f = get()->BatchPutAsync(std::move(items), po);
  return std::make_unique<PyFuture>(PyFuture::Kind::kPut, std::move(f), std::move(views),
                                    py::list());
}

std::unique_ptr<PyFuture> PyClient::BatchGetIntoAsync(py::handle keys, py::handle handle,
                                                      std::vector<size_t> offsets, size_t capacity,
                                                      int64_t timeout_ms,
                                                      std::optional<uintptr_t> stream,
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
      get()->BatchGetIntoAsync(std::move(items), Deadline::FromTimeoutMs(timeout_ms), sync);
  return std::make_unique<PyFuture>(PyFuture::Kind::kGetInto, std::move(f),
                                    std::vector<BufferView>(), py::list());
}

py::dict PyClient::Stats() {
  ClientStats s = get()->stats();
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
  d["bytes_stored_rdma"] = s.bytes_stored_rdma;
  d["bytes_loaded_gpu_direct"] = s.bytes_loaded_gpu_direct;
  d["gpu_rdma_registration_failures"] = s.gpu_rdma_registration_failures;
  d["rdma_registered_buffers"] = s.rdma_registered_buffers;
  d["bytes_stored_shm"] = s.bytes_stored_shm;
  d["bytes_staged_shm"] = s.bytes_staged_shm;
  d["bytes_warmed_shm"] = s.bytes_warmed_shm;
  d["put_calls"] = s.put_calls;
  d["put_calls_joined"] = s.put_calls_joined;
  return d;
}

}  // namespace shelf::python
