/* The C APIs (shelf/shelf.h, shelf/mooncake.h, shelf/lmcache.h) exercised
 * from C against a running cluster. Compiled as C99 with -pedantic
 * -Werror, so the headers are proven to be C. The Mooncake and LMCache
 * APIs' calls on the cluster run through the wheel's Python layers too
 * (tests/python, CTest python_wheel_api); here, their C shapes and misuse.
 * shelf_c_api_checks(master) returns the number of failed checks and prints
 * each failure; c_api_test.cc starts the cluster and calls it. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "shelf/lmcache.h"
#include "shelf/mooncake.h"
#include "shelf/shelf.h"

int shelf_c_api_checks(const char* master);

static int failures;

#define CHECK(cond)                                                                            \
  do {                                                                                         \
    if (!(cond)) {                                                                             \
      fprintf(stderr, "%s:%d: check failed: %s (last error: %s)\n", __FILE__, __LINE__, #cond, \
              shelf_last_error());                                                             \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

#define CHECK_RC(call, want)                                                                   \
  do {                                                                                         \
    int rc_ = (call);                                                                          \
    if (rc_ != (want)) {                                                                       \
      fprintf(stderr, "%s:%d: %s returned %s, want %s (last error: %s)\n", __FILE__, __LINE__, \
              #call, shelf_status_name(rc_), shelf_status_name(want), shelf_last_error());     \
      ++failures;                                                                              \
    }                                                                                          \
  } while (0)

static void fill(unsigned char* p, size_t n, unsigned seed) {
  size_t i;
  uint32_t x = seed * 2654435761u + 1;
  for (i = 0; i < n; ++i) {
    x ^= x << 13;
    x ^= x >> 17;
    x ^= x << 5;
    p[i] = (unsigned char)x;
  }
}

static void check_status_names(void) {
  CHECK(strcmp(shelf_status_name(SHELF_OK), "OK") == 0);
  CHECK(strcmp(shelf_status_name(SHELF_NOT_FOUND), "NOT_FOUND") == 0);
  CHECK(strcmp(shelf_status_name(SHELF_DEADLINE_EXCEEDED), "DEADLINE_EXCEEDED") == 0);
  CHECK(strcmp(shelf_status_name(99), "UNKNOWN") == 0);
  CHECK(strcmp(shelf_status_name(-1), "UNKNOWN") == 0);
}

static void check_options(void) {
  shelf_options_t* opts = shelf_options_new();
  shelf_client_t* client = (shelf_client_t*)1;
  CHECK(opts != NULL);
  CHECK_RC(shelf_client_open(opts, &client), SHELF_INVALID_ARGUMENT); /* no master */
  CHECK(client == NULL);
  CHECK(strstr(shelf_last_error(), "masters") != NULL);
  CHECK_RC(shelf_options_add_master(opts, ""), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_timeout_ms(opts, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_transports(opts, 0, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_add_master(NULL, "x:1"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_threads(opts, 0, 1, 1), SHELF_OK);
  CHECK_RC(shelf_options_add_master(opts, "127.0.0.1:1"), SHELF_OK);
  CHECK_RC(shelf_client_open(opts, &client), SHELF_INVALID_ARGUMENT); /* 0 threads */
  shelf_options_free(opts);
  shelf_options_free(NULL);

  /* etcd's security files are read when the client opens. */
  opts = shelf_options_new();
  CHECK(opts != NULL);
  CHECK_RC(shelf_options_set_etcd_tls(NULL, NULL, NULL, NULL), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_etcd_user_file(NULL, "x"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_shm_store_uid(NULL, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_session_tag_payload(NULL, 1), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_session_tag_payload(opts, 1), SHELF_OK);
  CHECK_RC(shelf_options_set_etcd_tls(opts, NULL, NULL, NULL), SHELF_OK);
  CHECK_RC(shelf_options_set_etcd_user_file(opts, "/nonexistent/shelf-etcd-user"), SHELF_OK);
  CHECK_RC(shelf_options_add_master(opts, "etcd://127.0.0.1:1/c"), SHELF_OK);
  CHECK(shelf_client_open(opts, &client) != SHELF_OK);
  CHECK(strstr(shelf_last_error(), "shelf-etcd-user") != NULL);
  shelf_options_free(opts);

  /* A same-host store's uid: -1 (this process's) or a uid. */
  opts = shelf_options_new();
  CHECK(opts != NULL);
  CHECK_RC(shelf_options_add_master(opts, "127.0.0.1:1"), SHELF_OK);
  CHECK_RC(shelf_options_set_shm_store_uid(opts, -2), SHELF_OK);
  CHECK_RC(shelf_client_open(opts, &client), SHELF_INVALID_ARGUMENT);
  CHECK(strstr(shelf_last_error(), "shm_store_uid") != NULL);
  shelf_options_free(opts);

  /* A principal: its secret, or a credentials file read when the client
   * opens (docs/security.md). */
  opts = shelf_options_new();
  CHECK(opts != NULL);
  CHECK_RC(shelf_options_set_principal(NULL, "eng", "s"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set_credentials_file(NULL, "x", NULL), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_add_master(opts, "127.0.0.1:1"), SHELF_OK);
  CHECK_RC(shelf_options_set_principal(opts, "eng", NULL), SHELF_OK);
  CHECK_RC(shelf_client_open(opts, &client), SHELF_INVALID_ARGUMENT);
  CHECK(strstr(shelf_last_error(), "principal_secret") != NULL);
  CHECK_RC(shelf_options_set_credentials_file(opts, "/nonexistent/shelf-credentials", "eng"),
           SHELF_OK);
  CHECK(shelf_client_open(opts, &client) != SHELF_OK);
  CHECK(strstr(shelf_last_error(), "shelf-credentials") != NULL);
  shelf_options_free(opts);
}

static void check_keys(void) {
  /* The first vector of tests/data/key_vectors.json (chunk4_basic). */
  static const uint32_t tokens[12] = {128000, 791, 4062,  14198, 39935, 35308,
                                      927,    279, 16053, 5679,  13,    128001};
  static const char* want_hex = "011ce894f273beb7606958fba4885cfaef";
  shelf_key_builder_t* kb = NULL;
  uint8_t keys[3 * SHELF_CONTENT_KEY_BYTES];
  size_t count = 0, i;
  char hex[2 * SHELF_CONTENT_KEY_BYTES + 1];
  CHECK_RC(shelf_key_builder_new("example/model-7b", "bf16", "paged_nhd", 0, 1, NULL, 4, &kb),
           SHELF_OK);
  CHECK_RC(shelf_block_keys(kb, tokens, 12, keys, 10, &count), SHELF_OUT_OF_RANGE);
  CHECK(count == 3);
  CHECK_RC(shelf_block_keys(kb, tokens, 12, keys, sizeof(keys), &count), SHELF_OK);
  CHECK(count == 3);
  for (i = 0; i < SHELF_CONTENT_KEY_BYTES; ++i) sprintf(hex + 2 * i, "%02x", keys[i]);
  CHECK(strcmp(hex, want_hex) == 0);
  shelf_key_builder_free(kb);
  kb = (shelf_key_builder_t*)1;
  CHECK_RC(shelf_key_builder_new("m", "bf16", "l", 2, 2, "", 4, &kb), SHELF_INVALID_ARGUMENT);
  CHECK(kb == NULL);
  CHECK(strstr(shelf_last_error(), "tp_rank") != NULL);
}

static void check_blocks(shelf_client_t* c) {
  unsigned char data[5000], buf[8192];
  void* got = NULL;
  size_t size = 0;
  const void* keys[3];
  size_t key_lens[3];
  uint8_t present[3];
  int statuses[3];
  size_t matched = 99;
  const char k0[] = {'c', '/', 0, 'b', 'i', 'n'}; /* keys may hold 0 bytes */
  shelf_put_options_t po;
  fill(data, sizeof(data), 1);
  shelf_put_options_init(&po);
  CHECK(po.replicas == 1);
  CHECK(po.gpu.stream == NULL && po.gpu.event == NULL); /* no GPU ordering */
  CHECK(po.block == NULL);                              /* no block info */

  CHECK_RC(shelf_put(c, k0, sizeof(k0), data, sizeof(data), &po, 0), SHELF_OK);
  CHECK_RC(shelf_put(c, k0, sizeof(k0), data, sizeof(data), NULL, 0), SHELF_OK); /* exists */
  CHECK_RC(shelf_get(c, k0, sizeof(k0), &got, &size, 0), SHELF_OK);
  CHECK(size == sizeof(data) && got != NULL && memcmp(got, data, size) == 0);
  shelf_free(got);
  CHECK_RC(shelf_get_into(c, k0, sizeof(k0), buf, sizeof(buf), &size, 5000), SHELF_OK);
  CHECK(size == sizeof(data) && memcmp(buf, data, size) == 0);
  /* Buffer too small: OUT_OF_RANGE, the size still reported. */
  size = 0;
  CHECK_RC(shelf_get_into(c, k0, sizeof(k0), buf, 100, &size, 0), SHELF_OUT_OF_RANGE);
  CHECK(size == sizeof(data));
  CHECK(strstr(shelf_last_error(), "does not fit") != NULL);
  CHECK_RC(shelf_get(c, "c/absent", 8, &got, &size, 0), SHELF_NOT_FOUND);
  CHECK(got == NULL);

  keys[0] = k0;
  key_lens[0] = sizeof(k0);
  keys[1] = "c/absent";
  key_lens[1] = 8;
  keys[2] = k0;
  key_lens[2] = sizeof(k0);
  CHECK_RC(shelf_exists(c, keys, key_lens, 3, present, 0), SHELF_OK);
  CHECK(present[0] == 1 && present[1] == 0 && present[2] == 1);
  CHECK_RC(shelf_match_prefix(c, keys, key_lens, 3, &matched, 0), SHELF_OK);
  CHECK(matched == 1);
  CHECK_RC(shelf_remove(c, k0, sizeof(k0), 0), SHELF_OK);
  CHECK_RC(shelf_remove(c, k0, sizeof(k0), 0), SHELF_NOT_FOUND);
  CHECK_RC(shelf_put(c, k0, sizeof(k0), data, sizeof(data), NULL, 0), SHELF_OK);
  CHECK_RC(shelf_batch_remove(c, keys, key_lens, 3, statuses, 0), SHELF_OK);
  CHECK(statuses[0] == SHELF_OK && statuses[1] == SHELF_NOT_FOUND &&
        statuses[2] == SHELF_NOT_FOUND);
  CHECK_RC(shelf_batch_remove(c, keys, key_lens, 0, statuses, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_batch_remove(c, keys, key_lens, 3, NULL, 0), SHELF_INVALID_ARGUMENT);

  /* Bad arguments. */
  CHECK_RC(shelf_put(c, "", 0, data, 1, NULL, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_put(c, "k", 1, NULL, 1, NULL, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_put(NULL, "k", 1, data, 1, NULL, 0), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_match_prefix(c, keys, key_lens, 0, &matched, 0), SHELF_INVALID_ARGUMENT);
  /* A deadline already passed fails before any traffic. */
  CHECK_RC(shelf_get_into(c, "k", 1, buf, sizeof(buf), &size, -1), SHELF_DEADLINE_EXCEEDED);
  CHECK(strstr(shelf_last_error(), "already passed") != NULL);
  CHECK_RC(shelf_put(c, "k", 1, data, 1, NULL, -5), SHELF_DEADLINE_EXCEEDED);
}

static void check_batches(shelf_client_t* c) {
  enum { N = 4, B = 3000 };
  unsigned char data[N][B], out[N][B];
  const void* keys[N];
  size_t key_lens[N], sizes[N], caps[N], data_sizes[N];
  const void* datas[N];
  void* bufs[N];
  int statuses[N];
  static const char* names[N] = {"cb/0", "cb/1", "cb/2", "cb/3"};
  size_t i;
  for (i = 0; i < N; ++i) {
    fill(data[i], B, 10 + (unsigned)i);
    keys[i] = names[i];
    key_lens[i] = strlen(names[i]);
    datas[i] = data[i];
    data_sizes[i] = B;
    bufs[i] = out[i];
    caps[i] = B;
  }
  {
    /* Block info for the KV event stream: one block's, so a put takes it
     * and a batch put refuses it. */
    static const uint32_t tokens[4] = {1, 2, 3, 4};
    shelf_block_info_t info;
    shelf_put_options_t po;
    memset(&info, 0, sizeof(info));
    info.parent_key = names[0];
    info.parent_key_len = strlen(names[0]);
    info.has_engine_hash = 1;
    info.engine_hash = 0x1234;
    info.block_tokens = 4;
    info.token_ids = tokens;
    info.n_token_ids = 4;
    shelf_put_options_init(&po);
    po.block = &info;
    CHECK_RC(shelf_put(c, "c/with-info", 11, data[0], B, &po, 0), SHELF_OK);
    CHECK_RC(shelf_batch_put(c, keys, key_lens, datas, data_sizes, N, &po, statuses, 0),
             SHELF_INVALID_ARGUMENT);
    CHECK(strstr(shelf_last_error(), "describes one block") != NULL);
    CHECK_RC(shelf_remove(c, "c/with-info", 11, 0), SHELF_OK);
    {
      /* A batch takes one per item: item 1 names a model a topic cannot
       * carry, and only it is refused. */
      shelf_block_info_t per_item[N];
      memset(per_item, 0, sizeof(per_item));
      for (int i = 0; i < N; ++i) {
        per_item[i].has_engine_hash = 1;
        per_item[i].engine_hash = 0x100 + (uint64_t)i;
        per_item[i].model = "c-model";
      }
      per_item[1].model = "bad@model";
      shelf_put_options_init(&po);
      po.blocks = per_item;
      CHECK_RC(shelf_batch_put(c, keys, key_lens, datas, data_sizes, N, &po, statuses, 0),
               SHELF_OK);
      CHECK(statuses[0] == SHELF_OK && statuses[2] == SHELF_OK && statuses[3] == SHELF_OK);
      CHECK(statuses[1] == SHELF_INVALID_ARGUMENT);
      for (int i = 0; i < N; ++i) shelf_remove(c, keys[i], key_lens[i], 0);
    }
  }
  data_sizes[3] = 0; /* one bad item */
  CHECK_RC(shelf_batch_put(c, keys, key_lens, datas, data_sizes, N, NULL, statuses, 0), SHELF_OK);
  CHECK(statuses[0] == SHELF_OK && statuses[1] == SHELF_OK && statuses[2] == SHELF_OK);
  CHECK(statuses[3] == SHELF_INVALID_ARGUMENT);
  caps[1] = 10; /* too small */
  CHECK_RC(shelf_batch_get_into(c, keys, key_lens, bufs, caps, N, sizes, statuses, 0), SHELF_OK);
  CHECK(statuses[0] == SHELF_OK && memcmp(out[0], data[0], B) == 0 && sizes[0] == B);
  CHECK(statuses[1] == SHELF_OUT_OF_RANGE && sizes[1] == B);
  CHECK(statuses[2] == SHELF_OK && memcmp(out[2], data[2], B) == 0);
  CHECK(statuses[3] == SHELF_NOT_FOUND);
}

/* What languages binding the library at run time use: options and
 * counters by name, a batch get into the library's memory, locate, and
 * the asynchronous batches of bytes. */
static void check_by_name_and_bytes(shelf_client_t* c) {
  shelf_options_t* opts = shelf_options_new();
  uint64_t v = 0;
  size_t i, n_stats = 0;
  CHECK_RC(shelf_options_set(opts, "tcp_streams_per_block", "2"), SHELF_OK);
  CHECK_RC(shelf_options_set(opts, "rdma_gid_index", "-1"), SHELF_OK);
  CHECK_RC(shelf_options_set(opts, "allow_shm", "false"), SHELF_OK);
  CHECK_RC(shelf_options_set(opts, "warm_shm_bytes", "0"), SHELF_OK);
  CHECK_RC(shelf_options_set(opts, "warm_shm_bytes", "-1"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set(opts, "no_such_option", "1"), SHELF_INVALID_ARGUMENT);
  CHECK(strstr(shelf_last_error(), "no_such_option") != NULL);
  CHECK_RC(shelf_options_set(opts, "rdma_port", "-1"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set(opts, "allow_tcp", "yes"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set(opts, "timeout_ms", "12x"), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_options_set(opts, NULL, "1"), SHELF_INVALID_ARGUMENT);
  shelf_options_free(opts);

  while (shelf_client_stat_name(n_stats) != NULL) ++n_stats;
  CHECK(n_stats >= 20);
  CHECK_RC(shelf_client_stat(c, "bytes_stored", &v), SHELF_OK);
  CHECK_RC(shelf_client_stat(c, "bytes_warmed_shm", &v), SHELF_OK);
  CHECK_RC(shelf_client_stat(c, "no_such_counter", &v), SHELF_INVALID_ARGUMENT);

  {
    enum { N = 3 };
    static const char* names[N] = {"cn/0", "cn/missing", "cn/2"};
    const void* keys[N];
    size_t key_lens[N], sizes[N];
    const void* datas[N];
    size_t data_sizes[N];
    void* got[N];
    int statuses[N];
    char* json = NULL;
    shelf_future_t* f = NULL;
    const void* value = NULL;
    size_t value_size = 0;
    for (i = 0; i < N; ++i) {
      keys[i] = names[i];
      key_lens[i] = strlen(names[i]);
      datas[i] = names[i];
      data_sizes[i] = key_lens[i];
    }
    CHECK_RC(shelf_put(c, keys[0], key_lens[0], "zero", 4, NULL, 0), SHELF_OK);
    CHECK_RC(shelf_put(c, keys[2], key_lens[2], "two!", 4, NULL, 0), SHELF_OK);
    CHECK_RC(shelf_batch_get(c, keys, key_lens, N, got, sizes, statuses, 0), SHELF_OK);
    CHECK(statuses[0] == SHELF_OK && sizes[0] == 4 && memcmp(got[0], "zero", 4) == 0);
    CHECK(statuses[1] == SHELF_NOT_FOUND && got[1] == NULL);
    CHECK(statuses[2] == SHELF_OK && memcmp(got[2], "two!", 4) == 0);
    for (i = 0; i < N; ++i) shelf_free(got[i]);

    CHECK_RC(shelf_locate(c, keys, key_lens, 1, &json, 0), SHELF_OK);
    CHECK(json != NULL && strstr(json, "\"cluster_blocks\": 1") != NULL);
    CHECK(json != NULL && strstr(json, "\"tiers\": [\"dram\"]") != NULL);
    shelf_free(json);

    CHECK_RC(shelf_batch_get_async(c, keys, key_lens, N, 0, &f), SHELF_OK);
    CHECK_RC(shelf_future_result(f, statuses, NULL, N), SHELF_OK);
    CHECK_RC(shelf_future_value(f, 2, &value, &value_size), SHELF_OK);
    CHECK(value_size == 4 && memcmp(value, "two!", 4) == 0);
    CHECK_RC(shelf_future_value(f, 1, &value, &value_size), SHELF_NOT_FOUND);
    CHECK_RC(shelf_future_value(f, N, &value, &value_size), SHELF_INVALID_ARGUMENT);
    shelf_future_free(f);

    CHECK_RC(shelf_batch_put_async(c, keys, key_lens, datas, data_sizes, N, NULL, 0, &f),
             SHELF_OK);
    CHECK_RC(shelf_future_result(f, statuses, NULL, N), SHELF_OK);
    CHECK(statuses[0] == SHELF_OK && statuses[1] == SHELF_OK && statuses[2] == SHELF_OK);
    CHECK_RC(shelf_future_value(f, 0, &value, &value_size), SHELF_INVALID_ARGUMENT);
    shelf_future_free(f);
    for (i = 0; i < N; ++i) shelf_remove(c, keys[i], key_lens[i], 0);
  }
}

static void check_registered(shelf_client_t* c) {
  enum { N = 8, B = 64 * 1024 };
  unsigned char* src = (unsigned char*)malloc(N * B);
  unsigned char* dst = (unsigned char*)calloc(N, B);
  uint64_t in = 0, out = 0, handles[N];
  const void* keys[N];
  size_t key_lens[N], offsets[N], lens[N], sizes[N];
  int statuses[N];
  char names[N][16];
  shelf_future_t* f = NULL;
  size_t i;
  fill(src, N * B, 77);
  CHECK_RC(shelf_register_buffer(c, src, N * B, 0, &in), SHELF_OK);
  CHECK_RC(shelf_register_buffer(c, dst, N * B, 0, &out), SHELF_OK);
  CHECK(in != 0 && out != 0 && in != out);
  CHECK_RC(shelf_register_buffer(c, NULL, 10, 0, &in), SHELF_INVALID_ARGUMENT);

  for (i = 0; i < N; ++i) {
    sprintf(names[i], "creg/%u", (unsigned)i);
    keys[i] = names[i];
    key_lens[i] = strlen(names[i]);
    handles[i] = in;
    offsets[i] = i * B;
    lens[i] = B;
  }
  CHECK_RC(shelf_put_from(c, keys[0], key_lens[0], in, 0, B, NULL, 0), SHELF_OK);
  CHECK_RC(shelf_batch_put_from_async(c, keys, key_lens, handles, offsets, lens, N, NULL, 0, &f),
           SHELF_OK);
  CHECK(shelf_future_wait(f, 30000) == 1);
  CHECK(shelf_future_poll(f) == 1);
  CHECK_RC(shelf_future_result(f, statuses, NULL, N), SHELF_OK);
  for (i = 0; i < N; ++i) CHECK(statuses[i] == SHELF_OK);
  CHECK_RC(shelf_future_result(f, statuses, NULL, N + 1), SHELF_INVALID_ARGUMENT);
  shelf_future_free(f);

  for (i = 0; i < N; ++i) {
    handles[i] = out;
    offsets[i] = (N - 1 - i) * B;
  }
  f = NULL;
  CHECK_RC(shelf_batch_get_into_async(c, keys, key_lens, handles, offsets, lens, N, 0, &f),
           SHELF_OK);
  CHECK_RC(shelf_future_result(f, statuses, sizes, N), SHELF_OK);
  for (i = 0; i < N; ++i) {
    CHECK(statuses[i] == SHELF_OK && sizes[i] == B);
    CHECK(memcmp(dst + (N - 1 - i) * B, src + i * B, B) == 0);
  }
  shelf_future_free(f);

  /* Misuse: a range outside the buffer, an unknown handle. */
  CHECK_RC(shelf_get_into_buffer(c, keys[0], key_lens[0], out, N * B - 10, B, sizes, 0),
           SHELF_OUT_OF_RANGE);
  CHECK(strstr(shelf_last_error(), "outside registered buffer") != NULL);
  CHECK_RC(shelf_get_into_buffer(c, keys[0], key_lens[0], out, 0, B, sizes, 0), SHELF_OK);
  CHECK(memcmp(dst, src, B) == 0);
  /* The GPU-ordered form, on host memory: no sync given, or one ignored. */
  memset(dst, 0, B);
  CHECK_RC(shelf_get_into_buffer_gpu(c, keys[0], key_lens[0], out, 0, B, sizes, NULL, 0), SHELF_OK);
  CHECK(memcmp(dst, src, B) == 0);
  {
    shelf_gpu_sync_t none;
    none.stream = NULL;
    none.event = NULL;
    memset(dst, 0, B);
    CHECK_RC(shelf_get_into_buffer_gpu(c, keys[0], key_lens[0], out, 0, B, sizes, &none, 0),
             SHELF_OK);
    CHECK(memcmp(dst, src, B) == 0);
  }
  CHECK_RC(shelf_get_into_buffer_gpu(NULL, keys[0], key_lens[0], out, 0, B, sizes, NULL, 0),
           SHELF_INVALID_ARGUMENT);
  CHECK(strstr(shelf_last_error(), "shelf_get_into_buffer_gpu") != NULL);
  CHECK_RC(shelf_unregister_buffer(c, out), SHELF_OK);
  CHECK_RC(shelf_get_into_buffer(c, keys[0], key_lens[0], out, 0, B, sizes, 0),
           SHELF_INVALID_ARGUMENT);
  CHECK(strstr(shelf_last_error(), "not registered") != NULL);
  CHECK_RC(shelf_unregister_buffer(c, out), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_put_from(c, "creg/x", 6, 123456789, 0, 1, NULL, 0), SHELF_INVALID_ARGUMENT);
  /* A GPU registration of host memory never succeeds. */
  CHECK(shelf_register_buffer(c, dst, B, 1, &out) != SHELF_OK);
  CHECK_RC(shelf_unregister_buffer(c, in), SHELF_OK);
  {
    shelf_client_stats_t st;
    CHECK_RC(shelf_client_stats(c, &st), SHELF_OK);
    CHECK(st.bytes_loaded >= (uint64_t)N * B + B);
    CHECK(st.bytes_loaded == st.bytes_loaded_shm + st.bytes_loaded_tcp);
    CHECK(st.bytes_stored >= (uint64_t)N * B);
    CHECK_RC(shelf_client_stats(c, NULL), SHELF_INVALID_ARGUMENT);
  }
  free(src);
  free(dst);
}

static void check_closed(shelf_client_t* c) {
  unsigned char buf[16];
  size_t size = 0;
  uint64_t h = 0;
  shelf_future_t* f = NULL;
  const void* keys[1] = {"k"};
  size_t key_lens[1] = {1}, offsets[1] = {0}, caps[1] = {1};
  uint64_t handles[1] = {1};
  shelf_client_close(c);
  CHECK_RC(shelf_get_into(c, "k", 1, buf, sizeof(buf), &size, 0), SHELF_FAILED_PRECONDITION);
  CHECK(strstr(shelf_last_error(), "closed") != NULL);
  CHECK_RC(shelf_put(c, "k", 1, buf, 1, NULL, 0), SHELF_FAILED_PRECONDITION);
  CHECK_RC(shelf_register_buffer(c, buf, sizeof(buf), 0, &h), SHELF_FAILED_PRECONDITION);
  CHECK_RC(shelf_batch_get_into_async(c, keys, key_lens, handles, offsets, caps, 1, 0, &f),
           SHELF_FAILED_PRECONDITION);
  CHECK(f != NULL && shelf_future_poll(f) == 1);
  CHECK_RC(shelf_future_result(f, NULL, NULL, 1), SHELF_FAILED_PRECONDITION);
  shelf_future_free(f);
}

/* The Mooncake layer's C API: Mooncake's codes for misuse and before
 * setup, a round trip after it. */
static void check_mooncake(const char* master) {
  shelf_mc_store_t* s = shelf_mc_store_new();
  shelf_mc_replicate_config_t config;
  const char* key = "cmc/k";
  void* data = NULL;
  size_t size = 0;
  uint64_t pool = 0;
  int out[2];
  shelf_mc_replicate_config_init(&config);
  CHECK(config.replica_num == 1 && config.has_group_ids == 0);
  CHECK(shelf_mc_put(s, key, 5, "v", 1, &config, 0) == SHELF_MC_INVALID_PARAMS);
  CHECK(shelf_mc_setup(s, "h", "P2PHANDSHAKE", 0, 1 << 20, "udp", "", master, NULL) ==
        SHELF_MC_INVALID_PARAMS);
  CHECK(shelf_mc_setup(s, "h", "P2PHANDSHAKE", 0, 1 << 20, "tcp", "", master, NULL) == SHELF_MC_OK);
  CHECK(shelf_mc_put(s, key, 5, "value", 5, &config, 0) == SHELF_MC_OK);
  CHECK(shelf_mc_get(s, key, 5, &data, &size) == SHELF_MC_OK && size == 5 &&
        memcmp(data, "value", 5) == 0);
  shelf_free(data);
  CHECK(shelf_mc_get(s, "cmc/none", 8, &data, &size) == SHELF_MC_OBJECT_NOT_FOUND);
  CHECK(shelf_mc_get_size(s, key, 5) == 5);
  config.prefer_alloc_in_same_node = 1; /* Mooncake refuses it */
  CHECK(shelf_mc_put(s, key, 5, "value", 5, &config, 0) == SHELF_MC_INVALID_PARAMS);
  {
    const void* keys[2] = {"cmc/k", "cmc/none"};
    size_t lens[2] = {5, 8};
    CHECK(shelf_mc_batch_is_exist(s, keys, lens, 2, out) == SHELF_MC_OK);
    CHECK(out[0] == 1 && out[1] == 0);
  }
  CHECK(shelf_mc_register_buffer(s, 0, 16) == SHELF_MC_INVALID_PARAMS);
  CHECK(shelf_mc_remove(s, key, 5, 0) == SHELF_MC_OK);
  CHECK(shelf_mc_close(s) == SHELF_MC_OK);
  shelf_mc_store_free(s);
  shelf_mc_store_free(NULL);

  CHECK_RC(shelf_mc_host_alloc(0, &pool), SHELF_INVALID_ARGUMENT);
  CHECK_RC(shelf_mc_host_alloc(4096, &pool), SHELF_OK);
  CHECK(pool != 0 && ((unsigned char*)(uintptr_t)pool)[4095] == 0);
  CHECK(shelf_mc_host_free(pool) == 0);
  CHECK(shelf_mc_host_free(pool) == -1);
}

/* LMCache's connector C API: options checked at open, misuse at submit. */
static void check_lmcache(const char* master) {
  shelf_lmc_config_t config;
  shelf_lmc_t* c = NULL;
  shelf_lmc_drained_t* drained = NULL;
  shelf_lmc_completion_t done;
  size_t n = 0;
  const void* keys[1] = {"clm/k"};
  size_t lens[1] = {5};
  uint64_t id;
  shelf_lmc_config_init(&config);
  config.master = master;
  config.workers = 0;
  CHECK_RC(shelf_lmc_open(&config, &c), SHELF_INVALID_ARGUMENT);
  CHECK(c == NULL && strstr(shelf_last_error(), "workers") != NULL);
  config.workers = 1;
  config.tenant = "team-x";
  CHECK_RC(shelf_lmc_open(&config, &c), SHELF_PERMISSION_DENIED);
  config.tenant = NULL;
  CHECK_RC(shelf_lmc_open(&config, &c), SHELF_OK);
  if (c == NULL) return;
  CHECK(shelf_lmc_event_fd(c) >= 0);
  CHECK(shelf_lmc_submit(c, 7, keys, lens, 1, NULL, NULL) == 0);
  CHECK(shelf_lmc_submit(c, SHELF_LMC_GET, keys, lens, 1, NULL, NULL) == 0);
  id = shelf_lmc_submit(c, SHELF_LMC_EXISTS, keys, lens, 1, NULL, NULL);
  CHECK(id != 0);
  shelf_lmc_close(c); /* lets the queued batch finish */
  CHECK_RC(shelf_lmc_drain(c, &drained, &n), SHELF_OK);
  CHECK(n == 1);
  CHECK_RC(shelf_lmc_drained_get(drained, 0, &done), SHELF_OK);
  CHECK(done.future_id == id && done.ok && done.n_results == 1 && done.results[0] == 0);
  CHECK_RC(shelf_lmc_drained_get(drained, 1, &done), SHELF_INVALID_ARGUMENT);
  shelf_lmc_drained_free(drained);
  shelf_lmc_free(c);
}

int shelf_c_api_checks(const char* master) {
  shelf_options_t* opts;
  shelf_client_t* c = NULL;
  failures = 0;
  check_status_names();
  check_options();
  check_keys();
  check_mooncake(master);
  check_lmcache(master);

  opts = shelf_options_new();
  CHECK_RC(shelf_options_add_master(opts, master), SHELF_OK);
  CHECK_RC(shelf_options_set_timeout_ms(opts, 20000), SHELF_OK);
  CHECK_RC(shelf_client_open(opts, &c), SHELF_OK);
  shelf_options_free(opts);
  if (c == NULL) return failures + 1;
  check_blocks(c);
  check_batches(c);
  check_by_name_and_bytes(c);
  check_registered(c);
  check_closed(c);
  shelf_client_destroy(c);
  shelf_client_destroy(NULL);
  return failures;
}
