/* libshelf's C API: the client SDK for engines and languages that cannot use
 * the C++ API (client.h). Plain C99: opaque handles, int status codes, no
 * C++ types. docs/client.md is the guide.
 *
 *   shelf_options_t* opts = shelf_options_new();
 *   shelf_options_add_master(opts, "127.0.0.1:7000");
 *   shelf_client_t* client = NULL;
 *   if (shelf_client_open(opts, &client) != SHELF_OK) {
 *     fprintf(stderr, "open: %s\n", shelf_last_error());
 *   }
 *   shelf_options_free(opts);
 *   int rc = shelf_put(client, "block-0", 7, data, size, NULL, 0);
 *   size_t got = 0;
 *   rc = shelf_get_into(client, "block-0", 7, buf, cap, &got, 0);
 *   if (rc == SHELF_NOT_FOUND) { ... compute it ... }
 *   shelf_client_destroy(client);
 *
 * Status codes: every function that can fail returns an int equal to a
 * shelf::StatusCode (the canonical gRPC / Abseil codes): SHELF_OK (0) on
 * success. When a call fails, shelf_last_error() returns its message; the
 * message is per thread and stays valid until the thread's next call.
 *
 * Keys are byte strings (content keys hold any byte, 0 included), passed as
 * pointer and length: 1..256 bytes. Batches hold 1..1024 items.
 *
 * Deadlines: every call that talks to the cluster takes `timeout_ms`, the
 * time it may take: 0 means the client's default (shelf_options_set_timeout_ms),
 * a positive value that many milliseconds, and a negative value a deadline
 * already passed (an engine that computes "deadline - now" passes it as is):
 * the call fails with SHELF_DEADLINE_EXCEEDED before any network traffic.
 *
 * Errors common to the calls (see each function for its own):
 *   SHELF_INVALID_ARGUMENT     a null pointer where one is required, an empty
 *                              or too long key, size 0, a bad batch size
 *   SHELF_DEADLINE_EXCEEDED    the deadline passed
 *   SHELF_UNAVAILABLE          no master, or no replica, could be reached
 *   SHELF_UNAUTHENTICATED      the cluster needs a secret the client lacks
 *   SHELF_FAILED_PRECONDITION  the client was closed (shelf_client_close)
 *
 * Thread safety: a shelf_client_t may be used from any number of threads at
 * once. shelf_options_t, shelf_future_t and shelf_key_builder_t are not
 * synchronized (a key builder is read-only after creation, so its use from
 * many threads is fine). Ownership: each *_new / *_open / *_async result is
 * the caller's and is released with its *_free / *_destroy function.
 */
#ifndef SHELF_CLIENT_SHELF_H_
#define SHELF_CLIENT_SHELF_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Status codes: the values of shelf::StatusCode. */
enum {
  SHELF_OK = 0,
  SHELF_CANCELLED = 1,
  SHELF_UNKNOWN = 2,
  SHELF_INVALID_ARGUMENT = 3,
  SHELF_DEADLINE_EXCEEDED = 4,
  SHELF_NOT_FOUND = 5,
  SHELF_ALREADY_EXISTS = 6,
  SHELF_PERMISSION_DENIED = 7,
  SHELF_RESOURCE_EXHAUSTED = 8,
  SHELF_FAILED_PRECONDITION = 9,
  SHELF_ABORTED = 10,
  SHELF_OUT_OF_RANGE = 11,
  SHELF_UNIMPLEMENTED = 12,
  SHELF_INTERNAL = 13,
  SHELF_UNAVAILABLE = 14,
  SHELF_DATA_LOSS = 15,
  SHELF_UNAUTHENTICATED = 16
};

/* Limits. */
#define SHELF_KEY_BYTES_MAX 256
#define SHELF_BATCH_ITEMS_MAX 1024
/* Bytes of a content key (version byte + 16-byte digest). */
#define SHELF_CONTENT_KEY_BYTES 17

typedef struct shelf_options shelf_options_t;
typedef struct shelf_client shelf_client_t;
typedef struct shelf_future shelf_future_t;
typedef struct shelf_key_builder shelf_key_builder_t;

/* "NOT_FOUND" for 5, etc.; "UNKNOWN" for a value that is no code. Static. */
const char* shelf_status_name(int code);
/* The message of this thread's last failed call ("" if none). Valid until
 * this thread's next call into the library. */
const char* shelf_last_error(void);

/* ------------------------------------------------------------- options */

/* A fresh set of options with the defaults of shelf::ClientOptions. Never
 * null (aborts when out of memory). */
shelf_options_t* shelf_options_new(void);
void shelf_options_free(shelf_options_t* options); /* null is fine */
/* Each returns SHELF_INVALID_ARGUMENT for a null pointer or a value outside
 * its range (checked here or by shelf_client_open). */
int shelf_options_add_master(shelf_options_t* options, const char* host_port);
int shelf_options_set_secret(shelf_options_t* options, const char* secret);
/* Calls the master as `principal` of its --credentials, proven by a token
 * derived from `principal_secret` (ClientOptions::principal). */
int shelf_options_set_principal(shelf_options_t* options, const char* principal,
                                const char* principal_secret);
/* The same, the secret read from a credentials file holding `principal`'s
 * line (`principal` NULL or empty: the file's only one). */
int shelf_options_set_credentials_file(shelf_options_t* options, const char* path,
                                       const char* principal);
int shelf_options_set_timeout_ms(shelf_options_t* options, uint64_t timeout_ms); /* >= 1 */
int shelf_options_set_transports(shelf_options_t* options, int allow_tcp, int allow_shm);
int shelf_options_set_verify_checksums(shelf_options_t* options, int verify);
int shelf_options_set_tls_ca(shelf_options_t* options, const char* pem_path);
/* PEM client certificate and key for a master that requires mutual TLS
 * (NULL clears). */
int shelf_options_set_tls_client_cert(shelf_options_t* options, const char* cert_path,
                                      const char* key_path);
/* For an "etcd://..." master: PEM files securing the connection to etcd
 * (CA: TLS; certificate and key: etcd's --client-cert-auth), and a file
 * holding "USER:PASSWORD" for etcd's authentication (NULL clears). */
int shelf_options_set_etcd_tls(shelf_options_t* options, const char* ca_path, const char* cert_path,
                               const char* key_path);
int shelf_options_set_etcd_user_file(shelf_options_t* options, const char* path);
/* The uid a same-host store must run as for this client to map its segment
 * (ClientOptions::shm_store_uid): -1 for this process's effective uid (the
 * default); root always passes. */
int shelf_options_set_shm_store_uid(shelf_options_t* options, int64_t uid);
/* TLS 1.3 on the data plane to stores run with --data-tls
 * (ClientOptions::data_tls): enabled 0 or 1; ca_path the PEM CA that signed
 * the stores' certificates (required when enabled); cert_path and key_path
 * a client certificate for stores that require one (both or NULL). */
int shelf_options_set_data_tls(shelf_options_t* options, int enabled, const char* ca_path,
                               const char* cert_path, const char* key_path);
/* With a cluster secret, session tags over the block bytes too, not only
 * each frame's header (ClientOptions::session_tag_payload): enabled 0 or 1. */
int shelf_options_set_session_tag_payload(shelf_options_t* options, int enabled);
int shelf_options_set_threads(shelf_options_t* options, uint32_t transfer_threads,
                              uint32_t async_threads, uint32_t async_queue_max);
/* Any field of shelf::ClientOptions (client.h) by its name there, from
 * text: "secret", "timeout_ms", "allow_shm", "rdma_device",
 * "tcp_streams_per_block", ... Booleans are "1"/"0"/"true"/"false",
 * integers decimal. SHELF_INVALID_ARGUMENT, with the reason in
 * shelf_last_error(), for a name that is no option or a value out of its
 * type's range. The setters above are the same fields, typed. */
int shelf_options_set(shelf_options_t* options, const char* name, const char* value);

/* -------------------------------------------------------------- client */

/* Opens a client; *out gets it (null on failure). SHELF_INVALID_ARGUMENT:
 * no master, or an option out of range. `options` may be freed after. */
int shelf_client_open(const shelf_options_t* options, shelf_client_t** out);
/* Closes the client: later calls answer SHELF_FAILED_PRECONDITION; calls in
 * progress run to their end. The handle stays valid until destroyed. */
void shelf_client_close(shelf_client_t* client);
/* Closes (if needed), waits for asynchronous calls and frees. Null is fine.
 * REQUIRES: no other thread uses `client` any more, and every future of it
 * has been freed. */
void shelf_client_destroy(shelf_client_t* client);

/* How a transfer between a registered GPU buffer and the cluster orders with
 * the caller's CUDA work (shelf::GpuSync; docs/client.md, "GPU memory and
 * stream ordering"): `stream` a cudaStream_t, `event` a cudaEvent_t, both on
 * the buffer's device; null: not given (name the legacy default stream as
 * cudaStreamLegacy, not 0). A put's copy out of device memory waits for the
 * work on `stream` before the call and for `event`; a get's copy into device
 * memory waits for the work on `stream` before the call, then `event` is
 * recorded after it and later work on `stream` waits for it, and the call
 * returns once the copy is enqueued. Both null (the default): no ordering;
 * the caller synchronizes before a put, and a get's bytes are in place when
 * it returns. */
typedef struct shelf_gpu_sync {
  void* stream;
  void* event;
} shelf_gpu_sync_t;

/* What the master's KV event stream reports for one block (docs/events.md;
 * shelf::BlockEventInfo). Every field optional: zero / null says nothing. */
typedef struct shelf_block_info {
  const void* parent_key; /* the previous block's key in its prefix chain */
  size_t parent_key_len;
  int has_engine_hash;
  uint64_t engine_hash; /* the engine's block hash, published instead of the key's */
  int has_engine_parent_hash;
  uint64_t engine_parent_hash;
  uint32_t block_tokens;     /* tokens a block */
  const uint32_t* token_ids; /* the block's tokens, n_token_ids of them */
  size_t n_token_ids;
  /* the model of its event topic kv@<node>@<model> (1..128 printable bytes,
   * no '@'), or null: the model of a vLLM-format key, else the namespace */
  const char* model;
} shelf_block_info_t;

/* Options of a put; shelf_put_options_init sets the defaults (1 replica, no
 * GPU ordering, no block info). */
typedef struct shelf_put_options {
  uint32_t replicas;        /* 1..8 */
  int best_effort;          /* accept fewer replicas than asked */
  int prefer_local;         /* a replica on this host when possible */
  const char* spread_label; /* e.g. "zone", or null */
  shelf_gpu_sync_t gpu;     /* registered GPU buffers: what the put waits for */
  /* shelf_put and shelf_put_from only (batch puts answer
   * SHELF_INVALID_ARGUMENT); null for none. */
  const shelf_block_info_t* block;
  /* Batch puts only: blocks[i] describes item i (n of them); null for none. */
  const shelf_block_info_t* blocks;
} shelf_put_options_t;
void shelf_put_options_init(shelf_put_options_t* options);

/* Stores a block; `put_options` may be null (defaults). SHELF_OK also when
 * the key already exists. SHELF_RESOURCE_EXHAUSTED: no room in the cluster. */
int shelf_put(shelf_client_t* client, const void* key, size_t key_len, const void* data,
              size_t size, const shelf_put_options_t* put_options, int64_t timeout_ms);
/* Reads a block into a new buffer: *data (release with shelf_free) and
 * *size. SHELF_NOT_FOUND on a miss; SHELF_DATA_LOSS when every replica had
 * wrong bytes. */
int shelf_get(shelf_client_t* client, const void* key, size_t key_len, void** data, size_t* size,
              int64_t timeout_ms);
/* Reads n blocks (1..SHELF_BATCH_ITEMS_MAX) in one batch: data[i] (a new
 * buffer, release with shelf_free; null where the item failed) and
 * sizes[i]; statuses[i] as shelf_get would return it. The return is the
 * batch's status. */
int shelf_batch_get(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                    size_t n, void** data, size_t* sizes, int* statuses, int64_t timeout_ms);
/* Reads a block into `buffer` of `capacity` bytes; *size (may be null) gets
 * its size. SHELF_OUT_OF_RANGE, nothing read, when it does not fit (*size
 * still set); SHELF_NOT_FOUND on a miss. */
int shelf_get_into(shelf_client_t* client, const void* key, size_t key_len, void* buffer,
                   size_t capacity, size_t* size, int64_t timeout_ms);
/* present[i] = 1 when keys[i] (of key_lens[i] bytes) exists, else 0. */
int shelf_exists(shelf_client_t* client, const void* const* keys, const size_t* key_lens, size_t n,
                 uint8_t* present, int64_t timeout_ms);
/* SHELF_NOT_FOUND if absent; SHELF_FAILED_PRECONDITION if pinned. */
int shelf_remove(shelf_client_t* client, const void* key, size_t key_len, int64_t timeout_ms);
/* Removes n (1..SHELF_BATCH_ITEMS_MAX) keys in one master round trip;
 * statuses[i] (caller-allocated, n ints) as shelf_remove would return it. */
int shelf_batch_remove(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                       size_t n, int* statuses, int64_t timeout_ms);
/* *matched = the number of leading keys present (read leases taken). */
int shelf_match_prefix(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                       size_t n, size_t* matched, int64_t timeout_ms);

/* Where the chain of keys lives (shelf::Client::Locate; no lease, no LRU
 * move): *json (release with shelf_free) gets
 *   {"cluster_blocks": N, "nodes": [{"node_id": "...", "data_address":
 *    "HOST:PORT", "host_id": "...", "blocks": N, "dram_blocks": N,
 *    "tiers": ["dram"|"ssd", ...]}, ...]}
 * longest run first. */
int shelf_locate(shelf_client_t* client, const void* const* keys, const size_t* key_lens, size_t n,
                 char** json, int64_t timeout_ms);

/* One page of the keys matching the glob `pattern` (empty: all) after
 * `cursor` (empty: the first page), at most `count` (1..1024) of them, in
 * byte order (shelf::Client::ListKeys; for tools, not an engine's hot
 * path): *n keys packed back to back in *keys, their lengths in
 * *key_lens, and the next page's cursor in *next_cursor (length 0 on the
 * last page). Release *keys, *key_lens and *next_cursor with shelf_free. */
int shelf_list_keys(shelf_client_t* client, const void* pattern, size_t pattern_len,
                    const void* cursor, size_t cursor_len, size_t count, void** keys,
                    size_t** key_lens, size_t* n, void** next_cursor, size_t* next_cursor_len,
                    int64_t timeout_ms);

/* Batches. The return is the batch's status; statuses[i] (caller-allocated,
 * n ints) each item's, as the single call would return it. */
int shelf_batch_put(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                    const void* const* data, const size_t* sizes, size_t n,
                    const shelf_put_options_t* put_options, int* statuses, int64_t timeout_ms);
/* Block i into buffers[i] of capacities[i] bytes; sizes[i] (may be null as
 * a whole) gets its size. */
int shelf_batch_get_into(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                         void* const* buffers, const size_t* capacities, size_t n, size_t* sizes,
                         int* statuses, int64_t timeout_ms);

/* Transfer counters (shelf::ClientStats). */
typedef struct shelf_client_stats {
  uint64_t bytes_stored;     /* written to stores, all replicas */
  uint64_t bytes_loaded;     /* read from stores */
  uint64_t bytes_loaded_shm; /* of which through shared memory */
  uint64_t bytes_loaded_tcp; /* of which over TCP */
  uint64_t bytes_loaded_ssd; /* of which served from an SSD tier */
  uint64_t blocks_loaded_dram;
  uint64_t blocks_loaded_ssd;
  uint64_t checksum_mismatches;
  uint64_t replica_failovers; /* reads that moved on to another replica */
  uint64_t bytes_staged_gpu;  /* through pinned bounce buffers */
} shelf_client_stats_t;
/* Fills *stats. SHELF_INVALID_ARGUMENT for a null pointer. */
#if defined(__cplusplus) && defined(__GNUC__) && !defined(__clang__)
/* The function has its struct's tag for a name, as stat() has; C++ hides
   the tag behind it (use shelf_client_stats_t), and GCC's -Wshadow says so. */
#pragma GCC diagnostic push
#pragma GCC diagnostic ignored "-Wshadow"
#endif
int shelf_client_stats(const shelf_client_t* client, shelf_client_stats_t* stats);
#if defined(__cplusplus) && defined(__GNUC__) && !defined(__clang__)
#pragma GCC diagnostic pop
#endif

/* Every counter of shelf::ClientStats by its name there ("bytes_stored",
 * "location_cache_hits", ...), including those the struct above lacks:
 * shelf_client_stat_name(i) is the i-th name (static), null past the last.
 * SHELF_INVALID_ARGUMENT for a name that is no counter. */
const char* shelf_client_stat_name(size_t i);
int shelf_client_stat(const shelf_client_t* client, const char* name, uint64_t* value);

/* Frees memory the library returned (shelf_get). Null is fine. */
void shelf_free(void* p);

/* ---------------------------------------------------- registered buffers */

/* Registers [base, base + size) (gpu != 0: CUDA device memory) and sets
 * *handle (never 0). SHELF_INVALID_ARGUMENT: null base, size 0, or memory
 * of the other kind; SHELF_UNIMPLEMENTED: gpu where no CUDA runtime
 * (libcudart) can be loaded;
 * SHELF_FAILED_PRECONDITION: gpu with no usable device. */
int shelf_register_buffer(shelf_client_t* client, void* base, size_t size, int gpu,
                          uint64_t* handle);
/* Waits for calls using the buffer, then forgets it. SHELF_INVALID_ARGUMENT
 * when `handle` is not registered with this client. */
int shelf_unregister_buffer(shelf_client_t* client, uint64_t handle);
/* Zero-copy put from / get into a registered buffer's [offset, offset + n).
 * SHELF_INVALID_ARGUMENT: handle not registered; SHELF_OUT_OF_RANGE: the
 * range is outside the buffer, or (get) the block is larger than capacity. */
int shelf_put_from(shelf_client_t* client, const void* key, size_t key_len, uint64_t handle,
                   size_t offset, size_t size, const shelf_put_options_t* put_options,
                   int64_t timeout_ms);
int shelf_get_into_buffer(shelf_client_t* client, const void* key, size_t key_len, uint64_t handle,
                          size_t offset, size_t capacity, size_t* size, int64_t timeout_ms);
/* shelf_get_into_buffer ordered with the caller's CUDA work by `gpu` (may be
 * null: none). SHELF_INTERNAL when CUDA refuses the stream or event. */
int shelf_get_into_buffer_gpu(shelf_client_t* client, const void* key, size_t key_len,
                              uint64_t handle, size_t offset, size_t capacity, size_t* size,
                              const shelf_gpu_sync_t* gpu, int64_t timeout_ms);

/* ---------------------------------------------------------------- async */

/* Starts a batch get into registered buffers: block i into
 * [offsets[i], offsets[i] + capacities[i]) of handles[i]. The arrays are
 * copied; the buffers must stay registered and valid until the future is
 * done. *future gets the future (also on a failure to start: then it is done
 * with that status); the return is SHELF_OK, or the error that kept the
 * batch from starting (closed client, SHELF_RESOURCE_EXHAUSTED when too
 * many asynchronous calls wait). */
int shelf_batch_get_into_async(shelf_client_t* client, const void* const* keys,
                               const size_t* key_lens, const uint64_t* handles,
                               const size_t* offsets, const size_t* capacities, size_t n,
                               int64_t timeout_ms, shelf_future_t** future);
/* shelf_batch_get_into_async ordered with the caller's CUDA work by `gpu`
 * (may be null: none), set up when the batch runs: work that reads the
 * blocks is enqueued after the future is done. */
int shelf_batch_get_into_async_gpu(shelf_client_t* client, const void* const* keys,
                                   const size_t* key_lens, const uint64_t* handles,
                                   const size_t* offsets, const size_t* capacities, size_t n,
                                   const shelf_gpu_sync_t* gpu, int64_t timeout_ms,
                                   shelf_future_t** future);
/* Starts a batch put from registered buffers, as above. */
int shelf_batch_put_from_async(shelf_client_t* client, const void* const* keys,
                               const size_t* key_lens, const uint64_t* handles,
                               const size_t* offsets, const size_t* sizes, size_t n,
                               const shelf_put_options_t* put_options, int64_t timeout_ms,
                               shelf_future_t** future);
/* Starts a batch get of n blocks into the library's memory; once done,
 * shelf_future_value gives each block. */
int shelf_batch_get_async(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                          size_t n, int64_t timeout_ms, shelf_future_t** future);
/* Starts a batch put of data[i] (sizes[i] bytes) under keys[i]: the bytes
 * are not copied, and must stay valid and unchanged until the future is
 * done. */
int shelf_batch_put_async(shelf_client_t* client, const void* const* keys, const size_t* key_lens,
                          const void* const* data, const size_t* sizes, size_t n,
                          const shelf_put_options_t* put_options, int64_t timeout_ms,
                          shelf_future_t** future);
/* 1 when the batch has finished, else 0. Never blocks. */
int shelf_future_poll(const shelf_future_t* future);
/* Waits up to timeout_ms (negative: without limit); 1 when finished. */
int shelf_future_wait(const shelf_future_t* future, int64_t timeout_ms);
/* Waits for the batch, then returns its status; statuses (may be null) gets
 * n per-item codes and sizes (may be null) n block sizes (gets only). n must
 * be the batch's size. */
int shelf_future_result(shelf_future_t* future, int* statuses, size_t* sizes, size_t n);
/* A shelf_batch_get_async's block i, once the batch is done (waits for it):
 * *data points into the future (valid until it is freed), *size its
 * bytes. The item's status (SHELF_NOT_FOUND on a miss), or the batch's
 * when the whole batch failed; SHELF_INVALID_ARGUMENT for an i out of
 * range or a future of another kind of batch. */
int shelf_future_value(shelf_future_t* future, size_t i, const void** data, size_t* size);
/* Waits for the batch if still running, then frees. Null is fine. */
void shelf_future_free(shelf_future_t* future);

/* ---------------------------------------------------------------- keys */

/* Content keys (docs/keys.md), the same as shelf::KeyBuilder. Strings are
 * UTF-8 and null-terminated; salt may be null. SHELF_INVALID_ARGUMENT, with
 * the reason in shelf_last_error(), for an invalid namespace. */
int shelf_key_builder_new(const char* model, const char* dtype, const char* kv_layout,
                          uint32_t tp_rank, uint32_t tp_size, const char* salt,
                          uint32_t chunk_tokens, shelf_key_builder_t** out);
void shelf_key_builder_free(shelf_key_builder_t* builder); /* null is fine */
/* The keys of the full chunks of tokens[0, n): *count = n / chunk_tokens keys
 * of SHELF_CONTENT_KEY_BYTES bytes each, written back to back into `keys`
 * (capacity `keys_capacity` bytes). SHELF_OUT_OF_RANGE, with *count set and
 * nothing written, when the keys do not fit. */
int shelf_block_keys(const shelf_key_builder_t* builder, const uint32_t* tokens, size_t n,
                     uint8_t* keys, size_t keys_capacity, size_t* count);

/* The key of `chunk` (chunk_tokens tokens) following the block keyed
 * `previous_key` (length 0 for the first block), into `key`
 * (SHELF_CONTENT_KEY_BYTES bytes). SHELF_INVALID_ARGUMENT when
 * previous_key is neither empty nor a version-1 key. */
int shelf_key_extend(const shelf_key_builder_t* builder, const void* previous_key,
                     size_t previous_key_len, const uint32_t* chunk, uint8_t* key);
/* The builder's namespace digest (the chain's first hash) into `digest` of
 * `capacity` bytes; *size gets its length (SHELF_OUT_OF_RANGE, nothing
 * written, when it does not fit). */
int shelf_key_builder_digest(const shelf_key_builder_t* builder, uint8_t* digest, size_t capacity,
                             size_t* size);
/* The canonical serialization of a namespace (docs/keys.md), the digest's
 * input, into `out`, as shelf_key_builder_digest. Not validated. */
int shelf_key_namespace_serialize(const char* model, const char* dtype, const char* kv_layout,
                                  uint32_t tp_rank, uint32_t tp_size, const char* salt,
                                  uint32_t chunk_tokens, uint8_t* out, size_t capacity,
                                  size_t* size);

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHELF_CLIENT_SHELF_H_ */
