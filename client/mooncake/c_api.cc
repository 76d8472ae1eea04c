// The C API of shelf/mooncake.h over MooncakeStore (store.h).
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "client/c_api_internal.h"
#include "client/mooncake/store.h"
#include "shelf/mooncake.h"
#include "shelf/shelf.h"

struct shelf_mc_store {
  shelf::mooncake::MooncakeStore store;
};

namespace {

using shelf::StatusCode;
using shelf::c_api::AppendJsonString;
using shelf::mooncake::kMcInvalidParams;
using shelf::mooncake::kMcOk;
using shelf::mooncake::ReplicateConfig;

static_assert(SHELF_MC_OK == kMcOk, "codes must match");
static_assert(SHELF_MC_INVALID_PARAMS == kMcInvalidParams, "");
static_assert(SHELF_MC_INVALID_KEY == shelf::mooncake::kMcInvalidKey, "");
static_assert(SHELF_MC_OBJECT_NOT_FOUND == shelf::mooncake::kMcObjectNotFound, "");
static_assert(SHELF_MC_NOT_SUPPORTED == shelf::mooncake::kMcNotSupported, "");

std::string Text(const char* s) { return s == nullptr ? std::string() : std::string(s); }

std::vector<std::string> TextList(const char* const* items, size_t n) {
  std::vector<std::string> out;
  for (size_t i = 0; i < n && items != nullptr; ++i) out.push_back(Text(items[i]));
  return out;
}

ReplicateConfig ToConfig(const shelf_mc_replicate_config_t* c) {
  ReplicateConfig r;
  if (c == nullptr) return r;
  r.replica_num = c->replica_num;
  r.nof_replica_num = c->nof_replica_num;
  r.dfs_replica_num = c->dfs_replica_num;
  r.with_soft_pin = c->with_soft_pin != 0;
  r.soft_pin_action = c->soft_pin_action;
  if (c->has_soft_pin_ttl_ms != 0) r.soft_pin_ttl_ms = c->soft_pin_ttl_ms;
  r.with_hard_pin = c->with_hard_pin != 0;
  r.data_type = c->data_type;
  r.preferred_segments = TextList(c->preferred_segments, c->n_preferred_segments);
  r.preferred_nof_segments = TextList(c->preferred_nof_segments, c->n_preferred_nof_segments);
  r.preferred_segment = Text(c->preferred_segment);
  r.prefer_alloc_in_same_node = c->prefer_alloc_in_same_node != 0;
  if (c->has_group_ids != 0) r.group_ids = TextList(c->group_ids, c->n_group_ids);
  return r;
}

std::string Key(const void* key, size_t len) {
  return key == nullptr ? std::string() : std::string(static_cast<const char*>(key), len);
}

std::vector<std::string> Keys(const void* const* keys, const size_t* lens, size_t n) {
  std::vector<std::string> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    out.push_back(keys == nullptr || lens == nullptr ? std::string() : Key(keys[i], lens[i]));
  }
  return out;
}

// `n_lists` lists, list i the next counts[i] entries of `flat`.
template <typename T>
std::vector<std::vector<T>> Lists(size_t n_lists, const size_t* counts, const T* flat) {
  std::vector<std::vector<T>> out;
  size_t at = 0;
  for (size_t i = 0; i < n_lists; ++i) {
    const size_t c = counts == nullptr ? 0 : counts[i];
    out.emplace_back(flat + at, flat + at + c);
    at += c;
  }
  return out;
}

// `s` into a new malloc'd, null-terminated string (*out; shelf_free).
int CopyText(const std::string& s, char** out) {
  auto* p = static_cast<char*>(std::malloc(s.size() + 1));
  if (p == nullptr) return kMcInvalidParams;
  std::memcpy(p, s.c_str(), s.size() + 1);
  *out = p;
  return kMcOk;
}

// `s` into a new malloc'd buffer (*data, *size; shelf_free).
int CopyBytes(const std::string& s, void** data, size_t* size) {
  void* p = std::malloc(s.empty() ? 1 : s.size());
  if (p == nullptr) return kMcInvalidParams;
  std::memcpy(p, s.data(), s.size());  // NOLINT(bugprone-not-null-terminated-result)
  *data = p;
  *size = s.size();
  return kMcOk;
}

std::string Hex(const std::string& bytes) {
  static const char kHex[] = "0123456789abcdef";
  std::string out;
  for (const char c : bytes) {
    const auto u = static_cast<unsigned char>(c);
    out.push_back(kHex[u >> 4]);
    out.push_back(kHex[u & 0xf]);
  }
  return out;
}

}  // namespace

extern "C" {

void shelf_mc_replicate_config_init(shelf_mc_replicate_config_t* config) {
  if (config == nullptr) return;
  std::memset(config, 0, sizeof(*config));
  config->replica_num = 1;
}

shelf_mc_store_t* shelf_mc_store_new(void) { return new shelf_mc_store(); }

void shelf_mc_store_free(shelf_mc_store_t* store) { delete store; }

int shelf_mc_setup(shelf_mc_store_t* store, const char* local_hostname, const char* metadata_server,
                   int64_t global_segment_size, int64_t local_buffer_size, const char* protocol,
                   const char* rdma_devices, const char* master_server_addr,
                   const shelf_mc_setup_extras_t* extras) {
  if (store == nullptr) return kMcInvalidParams;
  shelf::mooncake::SetupExtras e;
  if (extras != nullptr) {
    e.enable_ssd_offload = extras->enable_ssd_offload != 0;
    e.ssd_offload_path = Text(extras->ssd_offload_path);
    if (extras->tenant_id != nullptr) e.tenant_id = extras->tenant_id;
    e.enable_client_http_server = extras->enable_client_http_server != 0;
    e.client_http_port = extras->client_http_port;
  }
  return store->store.Setup(Text(local_hostname), Text(metadata_server), global_segment_size,
                            local_buffer_size, Text(protocol), Text(rdma_devices),
                            Text(master_server_addr), e);
}

int shelf_mc_setup_config(shelf_mc_store_t* store, const char* const* names,
                          const char* const* values, size_t n) {
  if (store == nullptr || (n > 0 && (names == nullptr || values == nullptr))) {
    return kMcInvalidParams;
  }
  std::map<std::string, std::string> config;
  for (size_t i = 0; i < n; ++i) config[Text(names[i])] = Text(values[i]);
  return store->store.SetupConfig(config);
}

int shelf_mc_setup_dummy(shelf_mc_store_t* store, int64_t mem_pool_size, int64_t local_buffer_size,
                         const char* server_address) {
  if (store == nullptr) return kMcInvalidParams;
  return store->store.SetupDummy(mem_pool_size, local_buffer_size, Text(server_address));
}

int shelf_mc_close(shelf_mc_store_t* store) {
  return store == nullptr ? kMcInvalidParams : store->store.Close();
}

int shelf_mc_health_check(shelf_mc_store_t* store) {
  return store == nullptr ? kMcInvalidParams : store->store.HealthCheck();
}

int shelf_mc_hostname(shelf_mc_store_t* store, char** hostname) {
  if (store == nullptr || hostname == nullptr) return kMcInvalidParams;
  return CopyText(store->store.Hostname(), hostname);
}

int shelf_mc_put(shelf_mc_store_t* store, const void* key, size_t key_len, const void* data,
                 size_t size, const shelf_mc_replicate_config_t* config, int replace) {
  if (store == nullptr || (data == nullptr && size > 0)) return kMcInvalidParams;
  const auto* bytes = static_cast<const char*>(data);
  return replace != 0 ? store->store.Upsert(Key(key, key_len), bytes, size, ToConfig(config))
                      : store->store.Put(Key(key, key_len), bytes, size, ToConfig(config));
}

int shelf_mc_put_batch(shelf_mc_store_t* store, const void* const* keys, const size_t* key_lens,
                       const void* const* data, const size_t* sizes, size_t n,
                       const shelf_mc_replicate_config_t* config) {
  if (store == nullptr || (n > 0 && (data == nullptr || sizes == nullptr))) {
    return kMcInvalidParams;
  }
  std::vector<std::pair<const char*, size_t>> values;
  for (size_t i = 0; i < n; ++i) values.emplace_back(static_cast<const char*>(data[i]), sizes[i]);
  return store->store.PutBatch(Keys(keys, key_lens, n), values, ToConfig(config));
}

int shelf_mc_get(shelf_mc_store_t* store, const void* key, size_t key_len, void** data,
                 size_t* size) {
  if (store == nullptr || data == nullptr || size == nullptr) return kMcInvalidParams;
  *data = nullptr;
  *size = 0;
  std::string value;
  if (int rc = store->store.Get(Key(key, key_len), &value); rc != kMcOk) return rc;
  return CopyBytes(value, data, size);
}

int shelf_mc_batch_get(shelf_mc_store_t* store, const void* const* keys, const size_t* key_lens,
                       size_t n, void** data, size_t* sizes, int* codes) {
  if (store == nullptr || (n > 0 && (data == nullptr || sizes == nullptr || codes == nullptr))) {
    return kMcInvalidParams;
  }
  std::vector<std::string> values(n);
  std::vector<shelf::Status> statuses(n, shelf::Status(StatusCode::kInvalidArgument, "bad key"));
  store->store.BatchGetValues(Keys(keys, key_lens, n), &values, &statuses);
  for (size_t i = 0; i < n; ++i) {
    data[i] = nullptr;
    sizes[i] = 0;
    codes[i] = shelf::mooncake::ToMooncake(statuses[i]);
    if (statuses[i].ok()) codes[i] = CopyBytes(values[i], &data[i], &sizes[i]);
  }
  return kMcOk;
}

int shelf_mc_batch_is_exist(shelf_mc_store_t* store, const void* const* keys,
                            const size_t* key_lens, size_t n, int* out) {
  if (store == nullptr || (n > 0 && out == nullptr)) return kMcInvalidParams;
  std::vector<int> r = store->store.BatchIsExist(Keys(keys, key_lens, n));
  std::copy(r.begin(), r.end(), out);
  return kMcOk;
}

int shelf_mc_remove(shelf_mc_store_t* store, const void* key, size_t key_len, int force) {
  if (store == nullptr) return kMcInvalidParams;
  return store->store.Remove(Key(key, key_len), force != 0);
}

int shelf_mc_batch_remove(shelf_mc_store_t* store, const void* const* keys, const size_t* key_lens,
                          size_t n, int force, int* out) {
  if (store == nullptr || (n > 0 && out == nullptr)) return kMcInvalidParams;
  std::vector<int> r = store->store.BatchRemove(Keys(keys, key_lens, n), force != 0);
  std::copy(r.begin(), r.end(), out);
  return kMcOk;
}

int64_t shelf_mc_remove_matching(shelf_mc_store_t* store, const char* pattern, int regex,
                                 int force) {
  if (store == nullptr) return kMcInvalidParams;
  return store->store.RemoveMatching(Text(pattern), regex != 0, force != 0);
}

int shelf_mc_batch_get_replica_desc(shelf_mc_store_t* store, const void* const* keys,
                                    const size_t* key_lens, size_t n, char** json) {
  if (store == nullptr || json == nullptr) return kMcInvalidParams;
  *json = nullptr;
  std::string out = "{";
  bool first_key = true;
  for (const auto& [key, replicas] : store->store.BatchGetReplicaDesc(Keys(keys, key_lens, n))) {
    out += first_key ? "\"" : ", \"";
    first_key = false;
    out += Hex(key) + "\": [";
    for (size_t i = 0; i < replicas.size(); ++i) {
      const shelf::mooncake::ReplicaDescriptor& d = replicas[i];
      out += i == 0 ? "{\"memory\": " : ", {\"memory\": ";
      out += d.memory ? "true" : "false";
      out += ", \"node_id\": ";
      AppendJsonString(&out, d.node_id);
      out += ", \"transport_endpoint\": ";
      AppendJsonString(&out, d.transport_endpoint);
      out += ", \"status\": " + std::to_string(static_cast<int>(d.status)) + "}";
    }
    out += "]";
  }
  out += "}";
  return CopyText(out, json);
}

int64_t shelf_mc_get_size(shelf_mc_store_t* store, const void* key, size_t key_len) {
  if (store == nullptr) return kMcInvalidParams;
  return store->store.GetSize(Key(key, key_len));
}

int shelf_mc_register_buffer(shelf_mc_store_t* store, uint64_t address, int64_t size) {
  return store == nullptr ? kMcInvalidParams : store->store.RegisterBuffer(address, size);
}

int shelf_mc_unregister_buffer(shelf_mc_store_t* store, uint64_t address) {
  return store == nullptr ? kMcInvalidParams : store->store.UnregisterBuffer(address);
}

int shelf_mc_batch_get_into(shelf_mc_store_t* store, const void* const* keys,
                            const size_t* key_lens, size_t n, const uint64_t* addresses,
                            const int64_t* sizes, int64_t* out) {
  if (store == nullptr || (n > 0 && (addresses == nullptr || sizes == nullptr || out == nullptr))) {
    return kMcInvalidParams;
  }
  std::vector<int64_t> r = store->store.BatchGetInto(
      Keys(keys, key_lens, n), std::vector<uint64_t>(addresses, addresses + n),
      std::vector<int64_t>(sizes, sizes + n));
  std::copy(r.begin(), r.end(), out);
  return kMcOk;
}

int shelf_mc_batch_put_from(shelf_mc_store_t* store, const void* const* keys,
                            const size_t* key_lens, size_t n, const uint64_t* addresses,
                            const int64_t* sizes, const shelf_mc_replicate_config_t* config,
                            int* out) {
  if (store == nullptr || (n > 0 && (addresses == nullptr || sizes == nullptr || out == nullptr))) {
    return kMcInvalidParams;
  }
  std::vector<int> r = store->store.BatchPutFrom(
      Keys(keys, key_lens, n), std::vector<uint64_t>(addresses, addresses + n),
      std::vector<int64_t>(sizes, sizes + n), ToConfig(config));
  std::copy(r.begin(), r.end(), out);
  return kMcOk;
}

int shelf_mc_batch_put_from_multi(shelf_mc_store_t* store, const void* const* keys,
                                  const size_t* key_lens, size_t n, size_t n_ptr_lists,
                                  const size_t* ptr_counts, const uint64_t* ptrs,
                                  size_t n_size_lists, const size_t* size_counts,
                                  const int64_t* sizes, const shelf_mc_replicate_config_t* config,
                                  int* out) {
  if (store == nullptr || (n > 0 && out == nullptr)) return 0;
  std::vector<int> r =
      store->store.BatchPutFromMulti(Keys(keys, key_lens, n), Lists(n_ptr_lists, ptr_counts, ptrs),
                                     Lists(n_size_lists, size_counts, sizes), ToConfig(config));
  std::copy(r.begin(), r.end(), out);
  return static_cast<int>(r.size());
}

int shelf_mc_batch_get_into_multi(shelf_mc_store_t* store, const void* const* keys,
                                  const size_t* key_lens, size_t n, size_t n_ptr_lists,
                                  const size_t* ptr_counts, const uint64_t* ptrs,
                                  size_t n_size_lists, const size_t* size_counts,
                                  const int64_t* sizes, int* out) {
  if (store == nullptr || (n > 0 && out == nullptr)) return 0;
  std::vector<int> r =
      store->store.BatchGetIntoMulti(Keys(keys, key_lens, n), Lists(n_ptr_lists, ptr_counts, ptrs),
                                     Lists(n_size_lists, size_counts, sizes));
  std::copy(r.begin(), r.end(), out);
  return static_cast<int>(r.size());
}

int shelf_mc_get_into_ranges(shelf_mc_store_t* store, size_t n_buffers, const uint64_t* buffers,
                             const size_t* keys_per_buffer, const void* const* keys,
                             const size_t* key_lens, const size_t* ranges_per_key,
                             const int64_t* dst_offsets, const int64_t* src_offsets,
                             const int64_t* sizes, int64_t* out, size_t* out_per_key) {
  if (store == nullptr || (n_buffers > 0 && (buffers == nullptr || keys_per_buffer == nullptr))) {
    return kMcInvalidParams;
  }
  using Ranges = std::vector<std::vector<std::vector<int64_t>>>;
  std::vector<std::vector<std::string>> all_keys(n_buffers);
  Ranges dst(n_buffers), src(n_buffers), len(n_buffers);
  size_t key_at = 0, range_at = 0;
  for (size_t b = 0; b < n_buffers; ++b) {
    for (size_t k = 0; k < keys_per_buffer[b]; ++k, ++key_at) {
      all_keys[b].push_back(Key(keys[key_at], key_lens[key_at]));
      const size_t r = ranges_per_key[key_at];
      dst[b].emplace_back(dst_offsets + range_at, dst_offsets + range_at + r);
      src[b].emplace_back(src_offsets + range_at, src_offsets + range_at + r);
      len[b].emplace_back(sizes + range_at, sizes + range_at + r);
      range_at += r;
    }
  }
  Ranges r = store->store.GetIntoRanges(std::vector<uint64_t>(buffers, buffers + n_buffers),
                                        all_keys, dst, src, len);
  size_t out_at = 0, k_at = 0;
  for (const auto& per_buffer : r) {
    for (const auto& per_key : per_buffer) {
      out_per_key[k_at++] = per_key.size();
      for (int64_t v : per_key) out[out_at++] = v;
    }
  }
  return kMcOk;
}

int shelf_mc_host_alloc(int64_t size, uint64_t* address) {
  if (address == nullptr) {
    return shelf::c_api::Fail(StatusCode::kInvalidArgument, "shelf_mc_host_alloc: address is null");
  }
  try {
    *address = shelf::mooncake::HostMemAllocator().Alloc(size);
  } catch (const std::runtime_error& e) {
    return shelf::c_api::Fail(
        size <= 0 ? StatusCode::kInvalidArgument : StatusCode::kResourceExhausted, e.what());
  }
  return SHELF_OK;
}

int shelf_mc_host_free(uint64_t address) {
  return shelf::mooncake::HostMemAllocator().Free(address);
}

}  // extern "C"
