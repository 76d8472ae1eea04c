/* LMCache's native connector over libshelf, as a C API: the connector
 * behind the wheel's shelf.lmcache.ShelfConnector (ctypes), the shape
 * LMCache's multiprocess mode loads as a `native_plugin` L2 adapter
 * (docs/integrations.md). Plain C99; errors as shelf.h's codes, with
 * shelf_last_error().
 *
 *   shelf_lmc_config_t config;
 *   shelf_lmc_config_init(&config);
 *   config.master = "10.0.0.1:7000";
 *   shelf_lmc_t* c = NULL;
 *   if (shelf_lmc_open(&config, &c) != SHELF_OK) { ... shelf_last_error() ... }
 *   uint64_t id = shelf_lmc_submit(c, SHELF_LMC_GET, keys, key_lens, n, buffers, lengths);
 *   poll(shelf_lmc_event_fd(c)) ... shelf_lmc_drain(c, &done, &count) ...
 *   shelf_lmc_free(c);
 *
 * Submissions never block; a batch's buffers must stay valid until its
 * completion has been drained.
 */
#ifndef SHELF_CLIENT_LMCACHE_H_
#define SHELF_CLIENT_LMCACHE_H_

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* A batch's operation. */
enum { SHELF_LMC_GET = 0, SHELF_LMC_SET = 1, SHELF_LMC_EXISTS = 2, SHELF_LMC_DELETE = 3 };

typedef struct shelf_lmc shelf_lmc_t;
typedef struct shelf_lmc_drained shelf_lmc_drained_t;

/* What a connector is opened with; shelf_lmc_config_init sets the defaults
 * (tenant "default", 4 workers, 1024 queued batches, 5000 ms, 8 transfer
 * threads, shared memory allowed). Strings may be null (empty). */
typedef struct shelf_lmc_config {
  const char* master; /* HOST:PORT[,HOST:PORT...] or etcd://HOST:PORT/CLUSTER */
  const char* secret_file;
  const char* credentials;
  const char* principal;
  const char* tenant;
  uint32_t workers;   /* 1..64 */
  uint32_t queue_max; /* 1..65536 */
  uint64_t timeout_ms;
  uint32_t transfer_threads;
  int allow_shm;
} shelf_lmc_config_t;
void shelf_lmc_config_init(shelf_lmc_config_t* config);

/* Opens a client and starts the connector's workers; *out gets it.
 * SHELF_INVALID_ARGUMENT (workers, queue_max, master, an unreadable secret
 * file), SHELF_PERMISSION_DENIED (a tenant not the principal's). */
int shelf_lmc_open(const shelf_lmc_config_t* config, shelf_lmc_t** out);
/* Refuses new batches, lets queued ones finish, closes the client. */
void shelf_lmc_close(shelf_lmc_t* connector);
/* Closes, then frees. Null is fine. */
void shelf_lmc_free(shelf_lmc_t* connector);

/* An eventfd, readable while completions wait to be drained. */
int shelf_lmc_event_fd(const shelf_lmc_t* connector);

/* Queues a batch of n keys and returns its future id (1, 2, ...). GET
 * reads key i into [buffers[i], + lengths[i]); SET stores those bytes;
 * EXISTS and DELETE take no buffers (null). 0, with shelf_last_error(),
 * for a null argument or an unknown op. */
uint64_t shelf_lmc_submit(shelf_lmc_t* connector, int op, const void* const* keys,
                          const size_t* key_lens, size_t n, void* const* buffers,
                          const size_t* lengths);

/* One finished batch: ok covers every key; error says what failed;
 * results (n_results bytes, 0 or 1; none for SET) which keys were read,
 * present or removed. */
typedef struct shelf_lmc_completion {
  uint64_t future_id;
  int ok;
  const char* error;
  const uint8_t* results;
  size_t n_results;
} shelf_lmc_completion_t;

/* The completions so far, oldest first (clears the eventfd): *drained
 * (release with shelf_lmc_drained_free) holds *n of them, read with
 * shelf_lmc_drained_get, valid until it is freed. */
int shelf_lmc_drain(shelf_lmc_t* connector, shelf_lmc_drained_t** drained, size_t* n);
int shelf_lmc_drained_get(const shelf_lmc_drained_t* drained, size_t i,
                          shelf_lmc_completion_t* completion);
void shelf_lmc_drained_free(shelf_lmc_drained_t* drained); /* null is fine */

#ifdef __cplusplus
} /* extern "C" */
#endif

#endif /* SHELF_CLIENT_LMCACHE_H_ */
