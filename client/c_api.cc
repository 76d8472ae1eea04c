// The C API (shelf/shelf.h) over shelf::Client.
#include <cstdlib>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "client/c_api_internal.h"
#include "client/memory_batch.h"
#include "shelf/client.h"
#include "shelf/keys.h"
#include "shelf/shelf.h"

namespace {

using shelf::BatchFuture;
using shelf::Client;
using shelf::Deadline;
using shelf::Status;
using shelf::StatusCode;

static_assert(SHELF_OK == static_cast<int>(StatusCode::kOk), "codes must match");
static_assert(SHELF_INVALID_ARGUMENT == static_cast<int>(StatusCode::kInvalidArgument), "");
static_assert(SHELF_DEADLINE_EXCEEDED == static_cast<int>(StatusCode::kDeadlineExceeded), "");
static_assert(SHELF_NOT_FOUND == static_cast<int>(StatusCode::kNotFound), "");
static_assert(SHELF_RESOURCE_EXHAUSTED == static_cast<int>(StatusCode::kResourceExhausted), "");
static_assert(SHELF_FAILED_PRECONDITION == static_cast<int>(StatusCode::kFailedPrecondition), "");
static_assert(SHELF_OUT_OF_RANGE == static_cast<int>(StatusCode::kOutOfRange), "");
static_assert(SHELF_UNIMPLEMENTED == static_cast<int>(StatusCode::kUnimplemented), "");
static_assert(SHELF_UNAVAILABLE == static_cast<int>(StatusCode::kUnavailable), "");
static_assert(SHELF_DATA_LOSS == static_cast<int>(StatusCode::kDataLoss), "");
static_assert(SHELF_UNAUTHENTICATED == static_cast<int>(StatusCode::kUnauthenticated), "");
static_assert(SHELF_KEY_BYTES_MAX == shelf::kKeyBytesMax, "");
static_assert(SHELF_BATCH_ITEMS_MAX == shelf::kBatchItemsMax, "");
static_assert(SHELF_CONTENT_KEY_BYTES == shelf::kKeyBytes, "");

thread_local std::string t_last_error;

using shelf::c_api::AppendJsonString;
using shelf::c_api::Fail;
using shelf::c_api::Report;

int NullArg(const char* fn, const char* what) {
  return Fail(StatusCode::kInvalidArgument, std::string(fn) + ": " + what + " is null");
}

bool MakeKeys(const void* const* keys, const size_t* key_lens, size_t n,
              std::vector<std::string>* out) {
  if (n > 0 && (keys == nullptr || key_lens == nullptr)) return false;
  out->clear();
  out->reserve(n);
  for (size_t i = 0; i < n; ++i) {
    if (keys[i] == nullptr && key_lens[i] != 0) return false;
    out->emplace_back(static_cast<const char*>(keys[i]), key_lens[i]);
  }
  return true;
}

std::string MakeKey(const void* key, size_t key_len) {
  if (key == nullptr) return std::string();  // rejected as an empty key
  return std::string(static_cast<const char*>(key), key_len);
}

shelf::BlockEventInfo ToBlockEventInfo(const shelf_block_info_t& b) {
  shelf::BlockEventInfo info;
  if (b.parent_key != nullptr) {
    info.parent_key.assign(static_cast<const char*>(b.parent_key), b.parent_key_len);
  }
  info.has_engine_hash = b.has_engine_hash != 0;
  info.engine_hash = b.engine_hash;
  info.has_engine_parent_hash = b.has_engine_parent_hash != 0;
  info.engine_parent_hash = b.engine_parent_hash;
  info.block_tokens = b.block_tokens;
  if (b.token_ids != nullptr) info.token_ids.assign(b.token_ids, b.token_ids + b.n_token_ids);
  if (b.model != nullptr) info.model = b.model;
  return info;
}

shelf::PutOptions ToPutOptions(const shelf_put_options_t* o, int64_t timeout_ms) {
  shelf::PutOptions po;
  if (o != nullptr) {
    po.replicas = o->replicas;
    po.best_effort = o->best_effort != 0;
    po.prefer_local = o->prefer_local != 0;
    if (o->spread_label != nullptr) po.spread_label = o->spread_label;
    po.gpu = shelf::GpuSync{o->gpu.stream, o->gpu.event};
    if (o->block != nullptr) po.block = ToBlockEventInfo(*o->block);
  }
  po.deadline = Deadline::FromTimeoutMs(timeout_ms);
  return po;
}

// Block i's event info of a batch put: put_options->blocks[i], when given.
shelf::BlockEventInfo BatchItemBlock(const shelf_put_options_t* o, size_t i) {
  if (o == nullptr || o->blocks == nullptr) return {};
  return ToBlockEventInfo(o->blocks[i]);
}

shelf::GpuSync ToGpuSync(const shelf_gpu_sync_t* gpu) {
  return gpu == nullptr ? shelf::GpuSync() : shelf::GpuSync{gpu->stream, gpu->event};
}

}  // namespace

namespace shelf::c_api {

int Fail(StatusCode code, std::string message) {
  t_last_error = std::move(message);
  return static_cast<int>(code);
}

int Report(const Status& s) {
  if (!s.ok()) t_last_error = s.message();
  return static_cast<int>(s.code());
}

ClientOptions& Options(shelf_options_t* options) { return options->options; }

ClientStats Stats(const shelf_client_t* client) { return client->client->stats(); }

// `text` as a JSON string literal.
void AppendJsonString(std::string* out, const std::string& text) {
  out->push_back('"');
  for (const char c : text) {
    const auto u = static_cast<unsigned char>(c);
    if (c == '"' || c == '\\') {
      out->push_back('\\');
      out->push_back(c);
    } else if (u < 0x20) {
      static const char kHex[] = "0123456789abcdef";
      out->append("\\u00");
      out->push_back(kHex[u >> 4]);
      out->push_back(kHex[u & 0xf]);
    } else {
      out->push_back(c);
    }
  }
  out->push_back('"');
}

}  // namespace shelf::c_api

struct shelf_future {
  BatchFuture future;
  size_t n = 0;
};

struct shelf_key_builder {
  explicit shelf_key_builder(shelf::KeyNamespace ns) : builder(std::move(ns)) {}
  shelf::KeyBuilder builder;
};

namespace {

// A started batch as a shelf_future_t: *future gets it (also when the
// batch failed to start: then it is done with that status); SHELF_OK, or
// the error that kept it from starting.
int StartedFuture(BatchFuture started, size_t n, shelf_future_t** future) {
  auto f = std::make_unique<shelf_future>();
  f->n = n;
  f->future = std::move(started);
  int rc = f->future.Poll() ? Report(f->future.status()) : SHELF_OK;
  *future = f.release();
  return rc;
}

// `value` into a new malloc'd buffer (*data, *size): the bytes of
// shelf_get and shelf_batch_get. `fn` names the call in errors.
int CopyOut(const char* fn, const std::string& value, void** data, size_t* size) {
  // malloc(0) may return null: a block is never empty, but be exact.
  void* p = std::malloc(value.empty() ? 1 : value.size());
  if (p == nullptr)
    return Fail(StatusCode::kResourceExhausted, std::string(fn) + ": out of memory");
  // A value is bytes, not a string: the size says where it ends.
  std::memcpy(p, value.data(), value.size());  // NOLINT(bugprone-not-null-terminated-result)
  *data = p;
  *size = value.size();
  return SHELF_OK;
}

// `value` into the caller's `out` of `capacity` bytes; *size gets its
// length. SHELF_OUT_OF_RANGE, nothing written, when it does not fit.
int CopyInto(const char* fn, const std::string& value, uint8_t* out, size_t capacity,
             size_t* size) {
  *size = value.size();
  if (value.size() > capacity) {
    return Fail(StatusCode::kOutOfRange, std::string(fn) + ": " + std::to_string(value.size()) +
                                             " bytes, the buffer has " + std::to_string(capacity));
  }
  if (!value.empty() && out == nullptr) return NullArg(fn, "out");
  std::memcpy(out, value.data(), value.size());  // NOLINT(bugprone-not-null-terminated-result)
  return SHELF_OK;
}

// A KeyNamespace from the C API's arguments (salt may be null: none).
shelf::KeyNamespace MakeNamespace(const char* model, const char* dtype, const char* kv_layout,
                                  uint32_t tp_rank, uint32_t tp_size, const char* salt,
                                  uint32_t chunk_tokens) {
  shelf::KeyNamespace ns;
  ns.model = model;
  ns.dtype = dtype;
  ns.kv_layout = kv_layout;
  ns.tp_rank = tp_rank;
  ns.tp_size = tp_size;
  ns.salt = salt == nullptr ? "" : salt;
  ns.chunk_tokens = chunk_tokens;
  return ns;
}

// shelf_get_into_buffer[_gpu]; `fn` names the call in errors.
int GetIntoBuffer(const char* fn, shelf_client_t* client, const void* key, size_t key_len,
                  uint64_t handle, size_t offset, size_t capacity, size_t* size,
                  const shelf_gpu_sync_t* gpu, int64_t timeout_ms) {
  if (client == nullptr) return NullArg(fn, "client");
  return Report(client->client->GetInto(MakeKey(key, key_len), shelf::BufferHandle{handle}, offset,
                                        capacity, size, Deadline::FromTimeoutMs(timeout_ms),
                                        ToGpuSync(gpu)));
}

// shelf_batch_get_into_async[_gpu]; `fn` names the call in errors.
int BatchGetIntoAsync(const char* fn, shelf_client_t* client, const void* const* keys,
                      const size_t* key_lens, const uint64_t* handles, const size_t* offsets,
                      const size_t* capacities, size_t n, const shelf_gpu_sync_t* gpu,
                      int64_t timeout_ms, shelf_future_t** future) {
  if (future == nullptr) return NullArg(fn, "future");
  *future = nullptr;
  if (client == nullptr) return NullArg(fn, "client");
  if (n > 0 && (handles == nullptr || offsets == nullptr || capacities == nullptr)) {
    return NullArg(fn, "handles, offsets or capacities");
  }
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg(fn, "a key");
  std::vector<shelf::GetIntoItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    items[i] = shelf::GetIntoItem{std::move(k[i]), shelf::BufferHandle{handles[i]}, offsets[i],
                                  capacities[i]};
  }
  // A batch refused at submission is done already; report that at once.
  return StartedFuture(client->client->BatchGetIntoAsync(
                           std::move(items), Deadline::FromTimeoutMs(timeout_ms), ToGpuSync(gpu)),
                       n, future);
}

}  // namespace

extern "C" {

const char* shelf_status_name(int code) {
  if (code < 0 || code > SHELF_UNAUTHENTICATED) return "UNKNOWN";
  return shelf::StatusCodeName(static_cast<StatusCode>(code));
}

const char* shelf_last_error(void) { return t_last_error.c_str(); }

shelf_options_t* shelf_options_new(void) { return new shelf_options(); }

void shelf_options_free(shelf_options_t* options) { delete options; }

int shelf_options_add_master(shelf_options_t* options, const char* host_port) {
  if (options == nullptr) return NullArg("shelf_options_add_master", "options");
  if (host_port == nullptr || *host_port == '\0') {
    return Fail(StatusCode::kInvalidArgument, "shelf_options_add_master: empty address");
  }
  options->options.masters.emplace_back(host_port);
  return SHELF_OK;
}

int shelf_options_set_secret(shelf_options_t* options, const char* secret) {
  if (options == nullptr) return NullArg("shelf_options_set_secret", "options");
  options->options.secret = secret == nullptr ? "" : secret;
  return SHELF_OK;
}

int shelf_options_set_principal(shelf_options_t* options, const char* principal,
                                const char* principal_secret) {
  if (options == nullptr) return NullArg("shelf_options_set_principal", "options");
  options->options.principal = principal == nullptr ? "" : principal;
  options->options.principal_secret = principal_secret == nullptr ? "" : principal_secret;
  return SHELF_OK;
}

int shelf_options_set_credentials_file(shelf_options_t* options, const char* path,
                                       const char* principal) {
  if (options == nullptr) return NullArg("shelf_options_set_credentials_file", "options");
  options->options.credentials_file = path == nullptr ? "" : path;
  options->options.principal = principal == nullptr ? "" : principal;
  return SHELF_OK;
}

int shelf_options_set_timeout_ms(shelf_options_t* options, uint64_t timeout_ms) {
  if (options == nullptr) return NullArg("shelf_options_set_timeout_ms", "options");
  if (timeout_ms == 0) {
    return Fail(StatusCode::kInvalidArgument, "shelf_options_set_timeout_ms: must be >= 1");
  }
  options->options.timeout_ms = timeout_ms;
  return SHELF_OK;
}

int shelf_options_set_transports(shelf_options_t* options, int allow_tcp, int allow_shm) {
  if (options == nullptr) return NullArg("shelf_options_set_transports", "options");
  if (!allow_tcp && !allow_shm) {
    return Fail(StatusCode::kInvalidArgument, "shelf_options_set_transports: allows none");
  }
  options->options.allow_tcp = allow_tcp != 0;
  options->options.allow_shm = allow_shm != 0;
  return SHELF_OK;
}

int shelf_options_set_verify_checksums(shelf_options_t* options, int verify) {
  if (options == nullptr) return NullArg("shelf_options_set_verify_checksums", "options");
  options->options.verify_checksums = verify != 0;
  return SHELF_OK;
}

int shelf_options_set_tls_ca(shelf_options_t* options, const char* pem_path) {
  if (options == nullptr) return NullArg("shelf_options_set_tls_ca", "options");
  options->options.tls_ca = pem_path == nullptr ? "" : pem_path;
  return SHELF_OK;
}

int shelf_options_set_tls_client_cert(shelf_options_t* options, const char* cert_path,
                                      const char* key_path) {
  if (options == nullptr) return NullArg("shelf_options_set_tls_client_cert", "options");
  options->options.tls_cert = cert_path == nullptr ? "" : cert_path;
  options->options.tls_key = key_path == nullptr ? "" : key_path;
  return SHELF_OK;
}

int shelf_options_set_etcd_tls(shelf_options_t* options, const char* ca_path, const char* cert_path,
                               const char* key_path) {
  if (options == nullptr) return NullArg("shelf_options_set_etcd_tls", "options");
  options->options.etcd_ca = ca_path == nullptr ? "" : ca_path;
  options->options.etcd_cert = cert_path == nullptr ? "" : cert_path;
  options->options.etcd_key = key_path == nullptr ? "" : key_path;
  return SHELF_OK;
}

int shelf_options_set_etcd_user_file(shelf_options_t* options, const char* path) {
  if (options == nullptr) return NullArg("shelf_options_set_etcd_user_file", "options");
  options->options.etcd_user_file = path == nullptr ? "" : path;
  return SHELF_OK;
}

int shelf_options_set_data_tls(shelf_options_t* options, int enabled, const char* ca_path,
                               const char* cert_path, const char* key_path) {
  if (options == nullptr) return NullArg("shelf_options_set_data_tls", "options");
  options->options.data_tls = enabled != 0;
  options->options.data_tls_ca = ca_path == nullptr ? "" : ca_path;
  options->options.data_tls_cert = cert_path == nullptr ? "" : cert_path;
  options->options.data_tls_key = key_path == nullptr ? "" : key_path;
  return SHELF_OK;  // checked by shelf_client_open
}

int shelf_options_set_session_tag_payload(shelf_options_t* options, int enabled) {
  if (options == nullptr) return NullArg("shelf_options_set_session_tag_payload", "options");
  options->options.session_tag_payload = enabled != 0;
  return SHELF_OK;
}

int shelf_options_set_shm_store_uid(shelf_options_t* options, int64_t uid) {
  if (options == nullptr) return NullArg("shelf_options_set_shm_store_uid", "options");
  options->options.shm_store_uid = uid;
  return SHELF_OK;  // the range is checked by shelf_client_open
}

int shelf_options_set_threads(shelf_options_t* options, uint32_t transfer_threads,
                              uint32_t async_threads, uint32_t async_queue_max) {
  if (options == nullptr) return NullArg("shelf_options_set_threads", "options");
  options->options.transfer_threads = transfer_threads;
  options->options.async_threads = async_threads;
  options->options.async_queue_max = async_queue_max;
  return SHELF_OK;  // ranges are checked by shelf_client_open
}

int shelf_client_open(const shelf_options_t* options, shelf_client_t** out) {
  if (out == nullptr) return NullArg("shelf_client_open", "out");
  *out = nullptr;
  if (options == nullptr) return NullArg("shelf_client_open", "options");
  auto c = std::make_unique<shelf_client>();
  Status s = Client::Open(options->options, &c->client);
  if (!s.ok()) return Report(s);
  *out = c.release();
  return SHELF_OK;
}

void shelf_client_close(shelf_client_t* client) {
  if (client != nullptr) client->client->Close();
}

void shelf_client_destroy(shelf_client_t* client) { delete client; }

void shelf_put_options_init(shelf_put_options_t* options) {
  if (options == nullptr) return;
  options->replicas = 1;
  options->best_effort = 0;
  options->prefer_local = 0;
  options->spread_label = nullptr;
  options->gpu.stream = nullptr;
  options->gpu.event = nullptr;
  options->block = nullptr;
  options->blocks = nullptr;
}

int shelf_put(shelf_client_t* client, const void* key, size_t key_len, const void* data,
              size_t size, const shelf_put_options_t* put_options, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_put", "client");
  return Report(client->client->Put(MakeKey(key, key_len), data, size,
                                    ToPutOptions(put_options, timeout_ms)));
}

int shelf_get(shelf_client_t* client, const void* key, size_t key_len, void** data, size_t* size,
              int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_get", "client");
  if (data == nullptr || size == nullptr) return NullArg("shelf_get", "data or size");
  *data = nullptr;
  *size = 0;
  std::string value;
  Status s =
      client->client->Get(MakeKey(key, key_len), &value, Deadline::FromTimeoutMs(timeout_ms));
  if (!s.ok()) return Report(s);
  return CopyOut("shelf_get", value, data, size);
}

int shelf_batch_get(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                    size_t n, void** data, size_t* sizes, int* statuses, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_batch_get", "client");
  if (n > 0 && (data == nullptr || sizes == nullptr || statuses == nullptr)) {
    return NullArg("shelf_batch_get", "data, sizes or statuses");
  }
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_get", "a key");
  for (size_t i = 0; i < n; ++i) {
    data[i] = nullptr;
    sizes[i] = 0;
  }
  std::vector<std::string> values;
  std::vector<Status> st;
  Status s = client->client->BatchGet(k, &values, &st, Deadline::FromTimeoutMs(timeout_ms));
  if (!s.ok()) return Report(s);
  for (size_t i = 0; i < n; ++i) {
    statuses[i] =
        st[i].ok() ? CopyOut("shelf_batch_get", values[i], &data[i], &sizes[i]) : Report(st[i]);
  }
  return SHELF_OK;
}

int shelf_get_into(shelf_client_t* client, const void* key, size_t key_len, void* buffer,
                   size_t capacity, size_t* size, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_get_into", "client");
  return Report(client->client->GetInto(MakeKey(key, key_len), buffer, capacity, size,
                                        Deadline::FromTimeoutMs(timeout_ms)));
}

int shelf_exists(shelf_client_t* client, const void* const* keys, const size_t* key_lens, size_t n,
                 uint8_t* present, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_exists", "client");
  if (present == nullptr && n > 0) return NullArg("shelf_exists", "present");
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_exists", "a key");
  std::vector<bool> p;
  Status s = client->client->Exists(k, &p, Deadline::FromTimeoutMs(timeout_ms));
  if (!s.ok()) return Report(s);
  for (size_t i = 0; i < n; ++i) present[i] = p[i] ? 1 : 0;
  return SHELF_OK;
}

int shelf_remove(shelf_client_t* client, const void* key, size_t key_len, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_remove", "client");
  return Report(client->client->Remove(MakeKey(key, key_len), Deadline::FromTimeoutMs(timeout_ms)));
}

int shelf_batch_remove(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                       size_t n, int* statuses, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_batch_remove", "client");
  if (statuses == nullptr && n > 0) return NullArg("shelf_batch_remove", "statuses");
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_remove", "a key");
  std::vector<Status> st;
  Status s = client->client->BatchRemove(k, &st, Deadline::FromTimeoutMs(timeout_ms));
  if (!s.ok()) return Report(s);
  for (size_t i = 0; i < n; ++i) statuses[i] = Report(st[i]);
  return SHELF_OK;
}

int shelf_match_prefix(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                       size_t n, size_t* matched, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_match_prefix", "client");
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_match_prefix", "a key");
  return Report(client->client->MatchPrefix(k, matched, Deadline::FromTimeoutMs(timeout_ms)));
}

int shelf_locate(shelf_client_t* client, const void* const* keys, const size_t* key_lens, size_t n,
                 char** json, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_locate", "client");
  if (json == nullptr) return NullArg("shelf_locate", "json");
  *json = nullptr;
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_locate", "a key");
  std::vector<shelf::NodeRun> nodes;
  size_t cluster_blocks = 0;
  Status s =
      client->client->Locate(k, &nodes, &cluster_blocks, Deadline::FromTimeoutMs(timeout_ms));
  if (!s.ok()) return Report(s);
  std::string out = "{\"cluster_blocks\": " + std::to_string(cluster_blocks) + ", \"nodes\": [";
  for (size_t i = 0; i < nodes.size(); ++i) {
    const shelf::NodeRun& r = nodes[i];
    out += i == 0 ? "{\"node_id\": " : ", {\"node_id\": ";
    AppendJsonString(&out, r.node_id);
    out += ", \"data_address\": ";
    AppendJsonString(&out, r.data_address);
    out += ", \"host_id\": ";
    AppendJsonString(&out, r.host_id);
    out += ", \"blocks\": " + std::to_string(r.blocks) +
           ", \"dram_blocks\": " + std::to_string(r.dram_blocks) + ", \"tiers\": [";
    for (size_t t = 0; t < r.tiers.size(); ++t) {
      out += t == 0 ? "" : ", ";
      out += r.tiers[t] == shelf::Tier::kDram ? "\"dram\"" : "\"ssd\"";
    }
    out += "]}";
  }
  out += "]}";
  auto* p = static_cast<char*>(std::malloc(out.size() + 1));
  if (p == nullptr) return Fail(StatusCode::kResourceExhausted, "shelf_locate: out of memory");
  std::memcpy(p, out.c_str(), out.size() + 1);
  *json = p;
  return SHELF_OK;
}

int shelf_list_keys(shelf_client_t* client, const void* pattern, size_t pattern_len,
                    const void* cursor, size_t cursor_len, size_t count, void** keys,
                    size_t** key_lens, size_t* n, void** next_cursor, size_t* next_cursor_len,
                    int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_list_keys", "client");
  if (keys == nullptr || key_lens == nullptr || n == nullptr || next_cursor == nullptr ||
      next_cursor_len == nullptr) {
    return NullArg("shelf_list_keys", "an output");
  }
  *keys = nullptr;
  *key_lens = nullptr;
  *n = 0;
  *next_cursor = nullptr;
  *next_cursor_len = 0;
  std::vector<std::string> found;
  std::string next;
  Status s =
      client->client->ListKeys(MakeKey(cursor, cursor_len), MakeKey(pattern, pattern_len), count,
                               &found, &next, /*regex=*/false, Deadline::FromTimeoutMs(timeout_ms));
  if (!s.ok()) return Report(s);
  std::string packed;
  for (const std::string& k : found) packed += k;
  void* packed_out = nullptr;
  size_t packed_size = 0;
  if (int rc = CopyOut("shelf_list_keys", packed, &packed_out, &packed_size); rc != SHELF_OK) {
    return rc;
  }
  auto* lens =
      static_cast<size_t*>(std::malloc(sizeof(size_t) * (found.empty() ? 1 : found.size())));
  if (lens == nullptr) {
    std::free(packed_out);
    return Fail(StatusCode::kResourceExhausted, "shelf_list_keys: out of memory");
  }
  for (size_t i = 0; i < found.size(); ++i) lens[i] = found[i].size();
  if (int rc = CopyOut("shelf_list_keys", next, next_cursor, next_cursor_len); rc != SHELF_OK) {
    std::free(packed_out);
    std::free(lens);
    return rc;
  }
  *keys = packed_out;
  *key_lens = lens;
  *n = found.size();
  return SHELF_OK;
}

int shelf_batch_put(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                    const void* const* data, const size_t* sizes, size_t n,
                    const shelf_put_options_t* put_options, int* statuses, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_batch_put", "client");
  if (n > 0 && (data == nullptr || sizes == nullptr || statuses == nullptr)) {
    return NullArg("shelf_batch_put", "data, sizes or statuses");
  }
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_put", "a key");
  std::vector<shelf::PutItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    items[i] = shelf::PutItem{std::move(k[i]), data[i], sizes[i], BatchItemBlock(put_options, i)};
  }
  std::vector<Status> st;
  Status s = client->client->BatchPut(items, &st, ToPutOptions(put_options, timeout_ms));
  if (!s.ok()) return Report(s);
  for (size_t i = 0; i < n; ++i) statuses[i] = Report(st[i]);
  return SHELF_OK;
}

int shelf_batch_get_into(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                         void* const* buffers, const size_t* capacities, size_t n, size_t* sizes,
                         int* statuses, int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_batch_get_into", "client");
  if (n > 0 && (buffers == nullptr || capacities == nullptr || statuses == nullptr)) {
    return NullArg("shelf_batch_get_into", "buffers, capacities or statuses");
  }
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_get_into", "a key");
  std::vector<void*> targets(buffers, buffers + n);
  std::vector<size_t> caps(capacities, capacities + n);
  std::vector<Status> st;
  std::vector<size_t> sz;
  Status s = shelf::BatchGetIntoMemory(client->client.get(), k, targets, caps,
                                       Deadline::FromTimeoutMs(timeout_ms), &st, &sz);
  if (!s.ok()) return Report(s);
  for (size_t i = 0; i < n; ++i) {
    if (sizes != nullptr) sizes[i] = sz[i];
    statuses[i] = Report(st[i]);
  }
  return SHELF_OK;
}

int shelf_client_stats(const shelf_client_t* client, shelf_client_stats_t* stats) {
  if (client == nullptr || stats == nullptr) return NullArg("shelf_client_stats", "an argument");
  shelf::ClientStats s = client->client->stats();
  stats->bytes_stored = s.bytes_stored;
  stats->bytes_loaded = s.bytes_loaded;
  stats->bytes_loaded_shm = s.bytes_loaded_shm;
  stats->bytes_loaded_tcp = s.bytes_loaded_tcp;
  stats->bytes_loaded_ssd = s.bytes_loaded_ssd;
  stats->blocks_loaded_dram = s.blocks_loaded_dram;
  stats->blocks_loaded_ssd = s.blocks_loaded_ssd;
  stats->checksum_mismatches = s.checksum_mismatches;
  stats->replica_failovers = s.replica_failovers;
  stats->bytes_staged_gpu = s.bytes_staged_gpu;
  return SHELF_OK;
}

void shelf_free(void* p) { std::free(p); }

int shelf_register_buffer(shelf_client_t* client, void* base, size_t size, int gpu,
                          uint64_t* handle) {
  if (client == nullptr) return NullArg("shelf_register_buffer", "client");
  if (handle == nullptr) return NullArg("shelf_register_buffer", "handle");
  shelf::BufferHandle h;
  Status s = client->client->RegisterBuffer(base, size, &h, gpu != 0);
  if (!s.ok()) return Report(s);
  *handle = h.id;
  return SHELF_OK;
}

int shelf_unregister_buffer(shelf_client_t* client, uint64_t handle) {
  if (client == nullptr) return NullArg("shelf_unregister_buffer", "client");
  return Report(client->client->UnregisterBuffer(shelf::BufferHandle{handle}));
}

int shelf_put_from(shelf_client_t* client, const void* key, size_t key_len, uint64_t handle,
                   size_t offset, size_t size, const shelf_put_options_t* put_options,
                   int64_t timeout_ms) {
  if (client == nullptr) return NullArg("shelf_put_from", "client");
  return Report(client->client->PutFrom(MakeKey(key, key_len), shelf::BufferHandle{handle}, offset,
                                        size, ToPutOptions(put_options, timeout_ms)));
}

int shelf_get_into_buffer(shelf_client_t* client, const void* key, size_t key_len, uint64_t handle,
                          size_t offset, size_t capacity, size_t* size, int64_t timeout_ms) {
  return GetIntoBuffer("shelf_get_into_buffer", client, key, key_len, handle, offset, capacity,
                       size, nullptr, timeout_ms);
}

int shelf_get_into_buffer_gpu(shelf_client_t* client, const void* key, size_t key_len,
                              uint64_t handle, size_t offset, size_t capacity, size_t* size,
                              const shelf_gpu_sync_t* gpu, int64_t timeout_ms) {
  return GetIntoBuffer("shelf_get_into_buffer_gpu", client, key, key_len, handle, offset, capacity,
                       size, gpu, timeout_ms);
}

int shelf_batch_get_into_async(shelf_client_t* client, const void* const* keys,
                               const size_t* key_lens, const uint64_t* handles,
                               const size_t* offsets, const size_t* capacities, size_t n,
                               int64_t timeout_ms, shelf_future_t** future) {
  return BatchGetIntoAsync("shelf_batch_get_into_async", client, keys, key_lens, handles, offsets,
                           capacities, n, nullptr, timeout_ms, future);
}

int shelf_batch_get_into_async_gpu(shelf_client_t* client, const void* const* keys,
                                   const size_t* key_lens, const uint64_t* handles,
                                   const size_t* offsets, const size_t* capacities, size_t n,
                                   const shelf_gpu_sync_t* gpu, int64_t timeout_ms,
                                   shelf_future_t** future) {
  return BatchGetIntoAsync("shelf_batch_get_into_async_gpu", client, keys, key_lens, handles,
                           offsets, capacities, n, gpu, timeout_ms, future);
}

int shelf_batch_put_from_async(shelf_client_t* client, const void* const* keys,
                               const size_t* key_lens, const uint64_t* handles,
                               const size_t* offsets, const size_t* sizes, size_t n,
                               const shelf_put_options_t* put_options, int64_t timeout_ms,
                               shelf_future_t** future) {
  if (future == nullptr) return NullArg("shelf_batch_put_from_async", "future");
  *future = nullptr;
  if (client == nullptr) return NullArg("shelf_batch_put_from_async", "client");
  if (n > 0 && (handles == nullptr || offsets == nullptr || sizes == nullptr)) {
    return NullArg("shelf_batch_put_from_async", "handles, offsets or sizes");
  }
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_put_from_async", "a key");
  std::vector<shelf::PutFromItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    items[i] = shelf::PutFromItem{std::move(k[i]), shelf::BufferHandle{handles[i]}, offsets[i],
                                  sizes[i], BatchItemBlock(put_options, i)};
  }
  return StartedFuture(
      client->client->BatchPutFromAsync(std::move(items), ToPutOptions(put_options, timeout_ms)), n,
      future);
}

int shelf_batch_get_async(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                          size_t n, int64_t timeout_ms, shelf_future_t** future) {
  if (future == nullptr) return NullArg("shelf_batch_get_async", "future");
  *future = nullptr;
  if (client == nullptr) return NullArg("shelf_batch_get_async", "client");
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_get_async", "a key");
  return StartedFuture(
      client->client->BatchGetAsync(std::move(k), Deadline::FromTimeoutMs(timeout_ms)), n, future);
}

int shelf_batch_put_async(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                          const void* const* data, const size_t* sizes, size_t n,
                          const shelf_put_options_t* put_options, int64_t timeout_ms,
                          shelf_future_t** future) {
  if (future == nullptr) return NullArg("shelf_batch_put_async", "future");
  *future = nullptr;
  if (client == nullptr) return NullArg("shelf_batch_put_async", "client");
  if (n > 0 && (data == nullptr || sizes == nullptr)) {
    return NullArg("shelf_batch_put_async", "data or sizes");
  }
  std::vector<std::string> k;
  if (!MakeKeys(keys, key_lens, n, &k)) return NullArg("shelf_batch_put_async", "a key");
  std::vector<shelf::PutItem> items(n);
  for (size_t i = 0; i < n; ++i) {
    items[i] = shelf::PutItem{std::move(k[i]), data[i], sizes[i], BatchItemBlock(put_options, i)};
  }
  return StartedFuture(
      client->client->BatchPutAsync(std::move(items), ToPutOptions(put_options, timeout_ms)), n,
      future);
}

int shelf_future_poll(const shelf_future_t* future) {
  return future == nullptr || future->future.Poll() ? 1 : 0;
}

int shelf_future_wait(const shelf_future_t* future, int64_t timeout_ms) {
  if (future == nullptr) return 1;
  if (timeout_ms < 0) {
    future->future.Wait();
    return 1;
  }
  return future->future.Wait(static_cast<uint64_t>(timeout_ms)) ? 1 : 0;
}

int shelf_future_result(shelf_future_t* future, int* statuses, size_t* sizes, size_t n) {
  if (future == nullptr) return NullArg("shelf_future_result", "future");
  if (n != future->n) {
    return Fail(StatusCode::kInvalidArgument, "shelf_future_result: n is " + std::to_string(n) +
                                                  " but the batch has " +
                                                  std::to_string(future->n) + " items");
  }
  const Status& s = future->future.status();
  if (!s.ok()) return Report(s);
  const std::vector<Status>& st = future->future.statuses();
  const std::vector<size_t>& sz = future->future.sizes();
  for (size_t i = 0; i < n; ++i) {
    if (statuses != nullptr) statuses[i] = i < st.size() ? Report(st[i]) : SHELF_INTERNAL;
    if (sizes != nullptr) sizes[i] = i < sz.size() ? sz[i] : 0;
  }
  return SHELF_OK;
}

int shelf_future_value(shelf_future_t* future, size_t i, const void** data, size_t* size) {
  if (future == nullptr || data == nullptr || size == nullptr) {
    return NullArg("shelf_future_value", "an argument");
  }
  *data = nullptr;
  *size = 0;
  const Status& s = future->future.status();
  if (!s.ok()) return Report(s);
  const std::vector<Status>& st = future->future.statuses();
  const std::vector<std::string>* values = future->future.values();
  if (i >= future->n || values->size() != future->n) {
    return Fail(StatusCode::kInvalidArgument, "shelf_future_value: item " + std::to_string(i) +
                                                  " of a batch of " + std::to_string(future->n) +
                                                  (values->empty() ? " that read no blocks" : ""));
  }
  if (i < st.size() && !st[i].ok()) return Report(st[i]);
  *data = (*values)[i].data();
  *size = (*values)[i].size();
  return SHELF_OK;
}

void shelf_future_free(shelf_future_t* future) { delete future; }

int shelf_key_builder_new(const char* model, const char* dtype, const char* kv_layout,
                          uint32_t tp_rank, uint32_t tp_size, const char* salt,
                          uint32_t chunk_tokens, shelf_key_builder_t** out) {
  if (out == nullptr) return NullArg("shelf_key_builder_new", "out");
  *out = nullptr;
  if (model == nullptr || dtype == nullptr || kv_layout == nullptr) {
    return NullArg("shelf_key_builder_new", "model, dtype or kv_layout");
  }
  shelf::KeyNamespace ns =
      MakeNamespace(model, dtype, kv_layout, tp_rank, tp_size, salt, chunk_tokens);
  std::string why;
  if (!shelf::KeyBuilder::Validate(ns, &why)) {
    return Fail(StatusCode::kInvalidArgument, "invalid key namespace: " + why);
  }
  *out = new shelf_key_builder(std::move(ns));
  return SHELF_OK;
}

void shelf_key_builder_free(shelf_key_builder_t* builder) { delete builder; }

int shelf_block_keys(const shelf_key_builder_t* builder, const uint32_t* tokens, size_t n,
                     uint8_t* keys, size_t keys_capacity, size_t* count) {
  if (builder == nullptr || count == nullptr)
    return NullArg("shelf_block_keys", "builder or count");
  if (tokens == nullptr && n > 0) return NullArg("shelf_block_keys", "tokens");
  size_t chunk = builder->builder.key_namespace().chunk_tokens;
  *count = n / chunk;
  if (*count * shelf::kKeyBytes > keys_capacity) {
    return Fail(StatusCode::kOutOfRange,
                "shelf_block_keys: " + std::to_string(*count) + " keys need " +
                    std::to_string(*count * shelf::kKeyBytes) + " bytes, the buffer has " +
                    std::to_string(keys_capacity));
  }
  if (*count > 0 && keys == nullptr) return NullArg("shelf_block_keys", "keys");
  std::vector<std::string> k = builder->builder.BlockKeys(tokens, n);
  for (size_t i = 0; i < k.size(); ++i) {
    std::memcpy(keys + i * shelf::kKeyBytes, k[i].data(), shelf::kKeyBytes);
  }
  return SHELF_OK;
}

int shelf_key_extend(const shelf_key_builder_t* builder, const void* previous_key,
                     size_t previous_key_len, const uint32_t* chunk, uint8_t* key) {
  if (builder == nullptr || chunk == nullptr || key == nullptr) {
    return NullArg("shelf_key_extend", "builder, chunk or key");
  }
  std::string k = builder->builder.Extend(MakeKey(previous_key, previous_key_len), chunk);
  if (k.empty()) {
    return Fail(StatusCode::kInvalidArgument,
                "shelf_key_extend: previous_key is neither empty nor a version-1 key");
  }
  std::memcpy(key, k.data(), shelf::kKeyBytes);
  return SHELF_OK;
}

int shelf_key_builder_digest(const shelf_key_builder_t* builder, uint8_t* digest, size_t capacity,
                             size_t* size) {
  if (builder == nullptr || size == nullptr) {
    return NullArg("shelf_key_builder_digest", "builder or size");
  }
  return CopyInto("shelf_key_builder_digest", builder->builder.namespace_digest(), digest, capacity,
                  size);
}

int shelf_key_namespace_serialize(const char* model, const char* dtype, const char* kv_layout,
                                  uint32_t tp_rank, uint32_t tp_size, const char* salt,
                                  uint32_t chunk_tokens, uint8_t* out, size_t capacity,
                                  size_t* size) {
  if (model == nullptr || dtype == nullptr || kv_layout == nullptr || size == nullptr) {
    return NullArg("shelf_key_namespace_serialize", "model, dtype, kv_layout or size");
  }
  shelf::KeyNamespace ns =
      MakeNamespace(model, dtype, kv_layout, tp_rank, tp_size, salt, chunk_tokens);
  return CopyInto("shelf_key_namespace_serialize", shelf::KeyBuilder::SerializeNamespace(ns), out,
                  capacity, size);
}

}  // extern "C"
