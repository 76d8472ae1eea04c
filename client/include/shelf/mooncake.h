/* Mooncake Store's MooncakeDistributedStore over libshelf, as a C API: the
 * layer behind the wheel's shelf.mooncake (ctypes) and any other language
 * that loads libshelf.so. Plain C99. docs/mooncake-compat.md lists each
 * call and where Shelf's semantics differ from Mooncake's.
 *
 * Conventions are Mooncake's, not shelf.h's: the store calls return 0 or
 * one of Mooncake's negative ErrorCode values (SHELF_MC_*), and batch
 * calls fill one code (or byte count) per key. Keys are (pointer, length)
 * pairs. Addresses passed to the *_from / *_into calls must lie inside a
 * region given to shelf_mc_register_buffer. A store is thread-safe.
 *
 *   shelf_mc_store_t* s = shelf_mc_store_new();
 *   int rc = shelf_mc_setup(s, "host", "P2PHANDSHAKE", 16 << 20, 16 << 20, "tcp", "",
 *                           "10.0.0.1:7000", NULL);
 *   rc = shelf_mc_put(s, "k", 1, data, size, NULL, 0);
 *   shelf_mc_store_free(s);
 */
#ifndef SHELF_CLIENT_MOONCAKE_H_
#define SHELF_CLIENT_MOONCAKE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Mooncake's ErrorCode values (mooncake-store/include/types.h). */
enum {
  SHELF_MC_OK = 0,
  SHELF_MC_INTERNAL_ERROR = -1,
  SHELF_MC_BUFFER_OVERFLOW = -10,
  SHELF_MC_NO_AVAILABLE_HANDLE = -200,
  SHELF_MC_INVALID_KEY = -400,
  SHELF_MC_INVALID_PARAMS = -600,
  SHELF_MC_OBJECT_NOT_FOUND = -704,
  SHELF_MC_OBJECT_ALREADY_EXISTS = -705,
  SHELF_MC_OBJECT_HAS_LEASE = -706,
  SHELF_MC_CHECKSUM_MISMATCH = -801,
  SHELF_MC_RPC_FAIL = -900,
  SHELF_MC_RPC_TIMEOUT = -901,
  SHELF_MC_NOT_SUPPORTED = -1012
};

typedef struct shelf_mc_store shelf_mc_store_t;

/* Mooncake's ReplicateConfig; shelf_mc_replicate_config_init sets
 * Mooncake's defaults (1 replica, nothing else). String lists are arrays
 * of n null-terminated strings. */
typedef struct shelf_mc_replicate_config {
  int64_t replica_num;
  int64_t nof_replica_num;
  int64_t dfs_replica_num;
  int with_soft_pin;
  int soft_pin_action; /* PRESERVE 0, ENABLE 1, DISABLE 2 */
  int has_soft_pin_ttl_ms;
  int64_t soft_pin_ttl_ms;
  int with_hard_pin;
  int data_type; /* UNKNOWN 0, KVCACHE 1 */
  const char* const* preferred_segments;
  size_t n_preferred_segments;
  const char* const* preferred_nof_segments;
  size_t n_preferred_nof_segments;
  const char* preferred_segment; /* null: none */
  int prefer_alloc_in_same_node;
  int has_group_ids; /* group_ids is None unless set */
  const char* const* group_ids;
  size_t n_group_ids;
} shelf_mc_replicate_config_t;
void shelf_mc_replicate_config_init(shelf_mc_replicate_config_t* config);

/* Mooncake's setup keywords after its positional arguments; null: their
 * defaults (no SSD offload, tenant "default", HTTP port 9300). */
typedef struct shelf_mc_setup_extras {
  int enable_ssd_offload;
  const char* ssd_offload_path;
  const char* tenant_id;
  int enable_client_http_server;
  int64_t client_http_port;
} shelf_mc_setup_extras_t;

/* A store, not set up; freed (closed first) with shelf_mc_store_free. */
shelf_mc_store_t* shelf_mc_store_new(void);
void shelf_mc_store_free(shelf_mc_store_t* store); /* null is fine */

/* setup, positional form (Shelf's credentials from SHELF_SECRET_FILE,
 * SHELF_CREDENTIALS, SHELF_PRINCIPAL). */
int shelf_mc_setup(shelf_mc_store_t* store, const char* local_hostname, const char* metadata_server,
                   int64_t global_segment_size, int64_t local_buffer_size, const char* protocol,
                   const char* rdma_devices, const char* master_server_addr,
                   const shelf_mc_setup_extras_t* extras);
/* setup, dict form: n (name, value-as-text) pairs, None values left out. */
int shelf_mc_setup_config(shelf_mc_store_t* store, const char* const* names,
                          const char* const* values, size_t n);
int shelf_mc_setup_dummy(shelf_mc_store_t* store, int64_t mem_pool_size, int64_t local_buffer_size,
                         const char* server_address);
int shelf_mc_close(shelf_mc_store_t* store);
int shelf_mc_health_check(shelf_mc_store_t* store);
/* *hostname (release with shelf_free) gets get_hostname's answer. */
int shelf_mc_hostname(shelf_mc_store_t* store, char** hostname);

/* put (replace 0) and upsert (replace 1) of `size` bytes. config null:
 * the defaults. */
int shelf_mc_put(shelf_mc_store_t* store, const void* key, size_t key_len, const void* data,
                 size_t size, const shelf_mc_replicate_config_t* config, int replace);
int shelf_mc_put_batch(shelf_mc_store_t* store, const void* const* keys, const size_t* key_lens,
                       const void* const* data, const size_t* sizes, size_t n,
                       const shelf_mc_replicate_config_t* config);
/* The block into *data (release with shelf_free) and *size. */
int shelf_mc_get(shelf_mc_store_t* store, const void* key, size_t key_len, void** data,
                 size_t* size);
/* Block i into data[i] (release each with shelf_free; null where it failed),
 * codes[i] its code. Returns 0. */
int shelf_mc_batch_get(shelf_mc_store_t* store, const void* const* keys, const size_t* key_lens,
                       size_t n, void** data, size_t* sizes, int* codes);
/* out[i]: 1 present, 0 absent, or a negative code. */
int shelf_mc_batch_is_exist(shelf_mc_store_t* store, const void* const* keys,
                            const size_t* key_lens, size_t n, int* out);
int shelf_mc_remove(shelf_mc_store_t* store, const void* key, size_t key_len, int force);
int shelf_mc_batch_remove(shelf_mc_store_t* store, const void* const* keys, const size_t* key_lens,
                          size_t n, int force, int* out);
/* remove_all (pattern "", regex 0) and remove_by_regex: the count removed,
 * or a negative code. */
int64_t shelf_mc_remove_matching(shelf_mc_store_t* store, const char* pattern, int regex,
                                 int force);
/* batch_get_replica_desc as JSON (release with shelf_free):
 * {"KEY-as-hex": [{"memory": true, "node_id": "...", "transport_endpoint":
 * "HOST:PORT", "status": 3}, ...], ...}; keys not found are left out. */
int shelf_mc_batch_get_replica_desc(shelf_mc_store_t* store, const void* const* keys,
                                    const size_t* key_lens, size_t n, char** json);
/* The block's size, or a negative code. */
int64_t shelf_mc_get_size(shelf_mc_store_t* store, const void* key, size_t key_len);

int shelf_mc_register_buffer(shelf_mc_store_t* store, uint64_t address, int64_t size);
int shelf_mc_unregister_buffer(shelf_mc_store_t* store, uint64_t address);
/* out[i]: the bytes read into [addresses[i], + sizes[i]), or a code. */
int shelf_mc_batch_get_into(shelf_mc_store_t* store, const void* const* keys,
                            const size_t* key_lens, size_t n, const uint64_t* addresses,
                            const int64_t* sizes, int64_t* out);
int shelf_mc_batch_put_from(shelf_mc_store_t* store, const void* const* keys,
                            const size_t* key_lens, size_t n, const uint64_t* addresses,
                            const int64_t* sizes, const shelf_mc_replicate_config_t* config,
                            int* out);
/* Multi-buffer blocks, their lists flattened: n_ptr_lists lists of
 * pointers (list i holds the next ptr_counts[i] entries of ptrs) and
 * n_size_lists lists of sizes (likewise), one of each per key when the call
 * is well formed. The return: the number of codes written to out (n, or 0
 * before setup, as Mooncake answers an empty list). */
int shelf_mc_batch_put_from_multi(shelf_mc_store_t* store, const void* const* keys,
                                  const size_t* key_lens, size_t n, size_t n_ptr_lists,
                                  const size_t* ptr_counts, const uint64_t* ptrs,
                                  size_t n_size_lists, const size_t* size_counts,
                                  const int64_t* sizes, const shelf_mc_replicate_config_t* config,
                                  int* out);
int shelf_mc_batch_get_into_multi(shelf_mc_store_t* store, const void* const* keys,
                                  const size_t* key_lens, size_t n, size_t n_ptr_lists,
                                  const size_t* ptr_counts, const uint64_t* ptrs,
                                  size_t n_size_lists, const size_t* size_counts,
                                  const int64_t* sizes, int* out);
/* get_into_ranges, flattened: buffer b has keys_per_buffer[b] keys (their
 * keys in order in keys/key_lens), key k has ranges_per_key[k] ranges (in
 * order in dst_offsets/src_offsets/sizes). out gets each key's results in
 * order, out_per_key[k] of them (its ranges' byte counts, or one code for
 * a key that failed whole); out holds at least one more than the ranges
 * per key. */
int shelf_mc_get_into_ranges(shelf_mc_store_t* store, size_t n_buffers, const uint64_t* buffers,
                             const size_t* keys_per_buffer, const void* const* keys,
                             const size_t* key_lens, const size_t* ranges_per_key,
                             const int64_t* dst_offsets, const int64_t* src_offsets,
                             const int64_t* sizes, int64_t* out, size_t* out_per_key);

/* MooncakeHostMemAllocator: `size` bytes of zeroed shared host memory
 * (*address); SHELF_INVALID_ARGUMENT or SHELF_RESOURCE_EXHAUSTED (shelf.h's
 * codes) with shelf_last_error()'s reason. free: 0, or -1 for an address
 * alloc did not return. */
int shelf_mc_host_alloc(int64_t size, uint64_t* address);
int shelf_mc_host_free(uint64_t address);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHELF_CLIENT_MOONCAKE_H_ */
