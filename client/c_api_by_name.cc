// The C API's options and counters by name (shelf_options_set,
// shelf_client_stat): every ClientOptions field and ClientStats counter
// reachable from languages that bind shelf.h at run time (the Python
// wheel's ctypes layer), without a setter or struct field per member, so
// the ABI stays as it is when options or counters are added.
#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <string>

#include "client/c_api_internal.h"
#include "shelf/client.h"
#include "shelf/shelf.h"

namespace {

using shelf::ClientOptions;
using shelf::ClientStats;
using shelf::StatusCode;
using shelf::c_api::Fail;

bool ParseBool(const char* v, bool* out) {
  if (std::strcmp(v, "1") == 0 || std::strcmp(v, "true") == 0) {
    *out = true;
    return true;
  }
  if (std::strcmp(v, "0") == 0 || std::strcmp(v, "false") == 0) {
    *out = false;
    return true;
  }
  return false;
}

// A decimal integer of T's range, the whole of `v`.
template <typename T>
bool ParseInt(const char* v, T* out) {
  if (*v == '\0') return false;
  errno = 0;
  char* end = nullptr;
  const long long n = std::strtoll(v, &end, 10);
  if (errno != 0 || *end != '\0') return false;
  if (n < 0) {
    if (!std::numeric_limits<T>::is_signed ||
        n < static_cast<long long>(std::numeric_limits<T>::min())) {
      return false;
    }
  } else if (static_cast<unsigned long long>(n) > std::numeric_limits<T>::max()) {
    return false;
  }
  *out = static_cast<T>(n);
  return true;
}

// How one option is set from its text: false when the text is no value of
// its type.
struct OptionField {
  const char* name;
  bool (*set)(ClientOptions& o, const char* value);
};

#define SHELF_STRING_OPTION(field)                                               \
  {                                                                              \
#field, [](ClientOptions & o, const char* v) { return (o.field = v, true); } \
  }
#define SHELF_BOOL_OPTION(field)                                                    \
  {                                                                                 \
#field, [](ClientOptions & o, const char* v) { return ParseBool(v, &o.field); } \
  }
#define SHELF_INT_OPTION(field)                                                    \
  {                                                                                \
#field, [](ClientOptions & o, const char* v) { return ParseInt(v, &o.field); } \
  }

const OptionField kOptionFields[] = {
    SHELF_STRING_OPTION(secret),
    SHELF_STRING_OPTION(principal),
    SHELF_STRING_OPTION(principal_secret),
    SHELF_STRING_OPTION(credentials_file),
    SHELF_INT_OPTION(timeout_ms),
    SHELF_BOOL_OPTION(allow_tcp),
    SHELF_BOOL_OPTION(allow_shm),
    SHELF_INT_OPTION(shm_store_uid),
    SHELF_INT_OPTION(warm_shm_bytes),
    SHELF_STRING_OPTION(rdma_device),
    SHELF_INT_OPTION(rdma_port),
    SHELF_INT_OPTION(rdma_gid_index),
    SHELF_INT_OPTION(rdma_traffic_class),
    SHELF_INT_OPTION(rdma_service_level),
    SHELF_INT_OPTION(rdma_pkey_index),
    SHELF_BOOL_OPTION(rdma_store_pull_puts),
    SHELF_INT_OPTION(rdma_connections_max),
    SHELF_INT_OPTION(rdma_gpu_registrations_max),
    SHELF_BOOL_OPTION(verify_checksums),
    SHELF_INT_OPTION(location_cache_entries),
    SHELF_INT_OPTION(master_call_streams),
    SHELF_BOOL_OPTION(data_tls),
    SHELF_STRING_OPTION(data_tls_ca),
    SHELF_STRING_OPTION(data_tls_cert),
    SHELF_STRING_OPTION(data_tls_key),
    SHELF_BOOL_OPTION(session_tag_payload),
    SHELF_STRING_OPTION(tls_ca),
    SHELF_STRING_OPTION(tls_cert),
    SHELF_STRING_OPTION(tls_key),
    SHELF_STRING_OPTION(etcd_ca),
    SHELF_STRING_OPTION(etcd_cert),
    SHELF_STRING_OPTION(etcd_key),
    SHELF_STRING_OPTION(etcd_user_file),
    SHELF_INT_OPTION(transfer_threads),
    SHELF_INT_OPTION(tcp_streams_per_block),
    SHELF_INT_OPTION(async_threads),
    SHELF_INT_OPTION(async_queue_max),
};

#undef SHELF_STRING_OPTION
#undef SHELF_BOOL_OPTION
#undef SHELF_INT_OPTION

struct StatField {
  const char* name;
  uint64_t ClientStats::*member;
};

#define SHELF_STAT(field) \
  { #field, &ClientStats::field }

const StatField kStatFields[] = {
    SHELF_STAT(bytes_stored),
    SHELF_STAT(bytes_stored_shm),
    SHELF_STAT(bytes_staged_shm),
    SHELF_STAT(bytes_warmed_shm),
    SHELF_STAT(bytes_stored_tcp),
    SHELF_STAT(bytes_loaded),
    SHELF_STAT(bytes_loaded_shm),
    SHELF_STAT(bytes_loaded_tcp),
    SHELF_STAT(bytes_loaded_rdma),
    SHELF_STAT(bytes_loaded_ssd),
    SHELF_STAT(blocks_loaded_dram),
    SHELF_STAT(blocks_loaded_ssd),
    SHELF_STAT(checksum_mismatches),
    SHELF_STAT(replica_failovers),
    SHELF_STAT(bytes_staged_gpu),
    SHELF_STAT(bytes_stored_rdma),
    SHELF_STAT(bytes_loaded_gpu_direct),
    SHELF_STAT(bytes_gpu_direct_checked),
    SHELF_STAT(gpu_rdma_registration_failures),
    SHELF_STAT(rdma_registered_buffers),
    SHELF_STAT(shm_refusals),
    SHELF_STAT(location_cache_hits),
    SHELF_STAT(location_cache_misses),
    SHELF_STAT(location_cache_fallbacks),
    SHELF_STAT(location_cache_entries),
    SHELF_STAT(location_cache_board_reads),
    SHELF_STAT(views_on_kept_leases),
    SHELF_STAT(read_lookups),
    SHELF_STAT(read_lookups_joined),
    SHELF_STAT(put_calls),
    SHELF_STAT(put_calls_joined),
};

#undef SHELF_STAT

}  // namespace

int shelf_options_set(shelf_options_t* options, const char* name, const char* value) {
  if (options == nullptr || name == nullptr || value == nullptr) {
    return Fail(StatusCode::kInvalidArgument, "shelf_options_set: an argument is null");
  }
  for (const OptionField& f : kOptionFields) {
    if (std::strcmp(f.name, name) != 0) continue;
    if (!f.set(shelf::c_api::Options(options), value)) {
      return Fail(StatusCode::kInvalidArgument,
                  std::string("shelf_options_set: '") + value + "' is not a value of " + name);
    }
    return SHELF_OK;
  }
  return Fail(StatusCode::kInvalidArgument,
              std::string("shelf_options_set: no client option is named '") + name + "'");
}

const char* shelf_client_stat_name(size_t i) {
  return i < sizeof(kStatFields) / sizeof(kStatFields[0]) ? kStatFields[i].name : nullptr;
}

int shelf_client_stat(const shelf_client_t* client, const char* name, uint64_t* value) {
  if (client == nullptr || name == nullptr || value == nullptr) {
    return Fail(StatusCode::kInvalidArgument, "shelf_client_stat: an argument is null");
  }
  const ClientStats s = shelf::c_api::Stats(client);
  for (const StatField& f : kStatFields) {
    if (std::strcmp(f.name, name) == 0) {
      *value = s.*f.member;
      return SHELF_OK;
    }
  }
  return Fail(StatusCode::kInvalidArgument,
              std::string("shelf_client_stat: no counter is named '") + name + "'");
}
