// libshelf: the client SDK that inference engines link.
//
// A Client talks to the master over gRPC for metadata (where a block lives,
// where to write one) and moves block bytes straight between the caller's
// memory and the stores: shared memory when the store is on this host, else
// the TCP data plane. Every read is checked against the writer's checksum;
// wrong bytes are never returned as a hit. docs/client.md is the guide.
//
//   shelf::ClientOptions opts;
//   opts.masters = {"127.0.0.1:7000"};
//   std::unique_ptr<shelf::Client> client;
//   shelf::Status s = shelf::Client::Open(opts, &client);
//   s = client->Put("block-0", data, size);
//   std::string bytes;
//   s = client->Get("block-0", &bytes);          // NOT_FOUND on a miss
//
//   // Zero-copy: register the engine's KV pool once, then move blocks
//   // straight between it and the cluster.
//   shelf::BufferHandle pool;
//   s = client->RegisterBuffer(kv_pool, kv_pool_bytes, &pool);
//   s = client->GetInto(key, pool, slot * block_bytes, block_bytes, &size);
//
//   // Asynchronous: start the loads, compute, then collect.
//   shelf::BatchFuture f = client->BatchGetIntoAsync(items);
//   ... compute ...
//   f.Wait();
//   for (const shelf::Status& st : f.statuses()) ...
//
// Thread safety: a Client is thread-safe; one Client may be shared by all of
// an engine's threads. A BatchFuture is not: use each from one thread at a
// time. Deadline, BufferHandle and the option structs are plain values.
//
// Errors (shelf::Status codes), common to every method that takes a key:
//   INVALID_ARGUMENT    empty key, key over 256 bytes, size 0, null data,
//                       batch of 0 or over 1024 items
//   DEADLINE_EXCEEDED   the call's deadline passed; a deadline already in the
//                       past fails at once, before any network traffic
//   UNAVAILABLE         no master, or no replica of a block, could be reached
//   UNAUTHENTICATED     the cluster needs a secret this client lacks
//   FAILED_PRECONDITION the client was closed (Close)
// Each method lists the codes specific to it. Batch calls return a status for
// the whole batch (not OK only when nothing could be done: closed client, a
// bad argument, master unreachable) and one status per item.
#ifndef SHELF_CLIENT_CLIENT_H_
#define SHELF_CLIENT_CLIENT_H_

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "shelf/limits.h"
#include "shelf/status.h"

namespace shelf {

// Limits of the API (shelf/limits.h: kKeyBytesMax, kBatchItemsMax,
// kReplicasMax), checked on every call (INVALID_ARGUMENT beyond them).

// When a call must be done by. Every call takes one. A plain number is a
// timeout in milliseconds counted from the start of the call, and 0 means
// the client's ClientOptions::timeout_ms, so `client->Get(key, &v, 250)`
// reads as "within 250 ms". Deadline::At takes an absolute time on the
// monotonic clock (std::chrono::steady_clock, CLOCK_MONOTONIC), the natural
// form for an engine that budgets a whole request: a deadline already in the
// past fails with DEADLINE_EXCEEDED before any network traffic.
class Deadline {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Kind { kClientDefault, kTimeout, kAt };

  // `timeout_ms` from the start of the call; 0: the client's default.
  // Implicit on purpose: every call took a `uint64_t timeout_ms` before
  // Deadline existed, and a number still means exactly that.
  Deadline(uint64_t timeout_ms = 0)  // NOLINT(google-explicit-constructor)
      : kind_(timeout_ms == 0 ? Kind::kClientDefault : Kind::kTimeout), timeout_ms_(timeout_ms) {}
  // The client's ClientOptions::timeout_ms.
  static Deadline ClientDefault() { return Deadline(); }
  // `when`, absolute. In the past (or now): the call fails at once.
  static Deadline At(Clock::time_point when) {
    Deadline d;
    d.kind_ = Kind::kAt;
    d.at_ = when;
    return d;
  }
  // `timeout` from now (the moment After is called, not the call's start).
  // Zero or negative: the deadline has already passed.
  static Deadline After(std::chrono::milliseconds timeout) { return At(Clock::now() + timeout); }
  // A signed timeout as the C API and the Python bindings take it: 0 the
  // client's default, > 0 that many milliseconds from the start of the
  // call, < 0 a deadline that has already passed.
  static Deadline FromTimeoutMs(int64_t timeout_ms) {
    if (timeout_ms < 0) return At(Clock::time_point::min());
    return Deadline(static_cast<uint64_t>(timeout_ms));
  }

  Kind kind() const { return kind_; }
  uint64_t timeout_ms() const { return timeout_ms_; }  // kTimeout only
  Clock::time_point at() const { return at_; }         // kAt only

 private:
  Kind kind_ = Kind::kClientDefault;
  uint64_t timeout_ms_ = 0;
  Clock::time_point at_{};
};

struct ClientOptions {
  // The master(s): "HOST:PORT" entries (at least one; an unreachable one
  // moves the client on to the next), or a single
  // "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER": the leader etcd names for
  // CLUSTER (the masters' --cluster), followed across failovers.
  std::vector<std::string> masters;
  std::string secret;  // cluster secret; empty for an open cluster
  // A principal of the master's --credentials (docs/security.md,
  // "Principals and tenants"): the client calls the master as `principal`,
  // proving it with a token derived from `principal_secret` (the secret
  // itself is never sent), and its keys live in the principal's tenant.
  // `secret` still guards the data plane. Instead of `principal_secret`,
  // `credentials_file` may name a private file in the credentials format
  // holding `principal`'s line (`principal` empty: the file's only one).
  // All empty: the master is called with the cluster secret's token.
  std::string principal;
  std::string principal_secret;
  std::string credentials_file;
  uint64_t timeout_ms = 5000;  // default deadline of each call
  bool allow_tcp = true;       // transports this client may use
  bool allow_shm = true;
  // The uid a store on this host must run as for this client to map its
  // segment (checked on the store's socket, SO_PEERCRED; root always
  // passes); -1: this process's effective uid. A store run by another user
  // (say `shelf`, engines as `vllm`) needs this set, and the engine's uid in
  // the store's --shm-allow-uids. A refused store is read over tcp.
  int64_t shm_store_uid = -1;
  // Bytes of each same-host store's segment read through once, in the
  // background at idle priority, after the segment is mapped: the first
  // read of a page through a new mapping costs a trap on hypervisors with
  // shadow page tables (about 1.8 us per 4 KiB page on a cloud VM; 30 us
  // on a 64 KiB block's first read against 2 us after), and this moves it
  // off the reads. The price is the page tables of those bytes (2 MiB per
  // GiB) and one background thread. 0: off.
  uint64_t warm_shm_bytes = uint64_t{4} << 30;
  // RDMA device for one-sided reads from stores that offer rdma (e.g.
  // "mlx5_0"); empty: no RDMA. Open fails when the device cannot be opened
  // or the library was built without RDMA. Buffers given to RegisterBuffer
  // are registered with the device once (GPU buffers through GPUDirect:
  // reads land in GPU memory directly); a GPU buffer the device cannot
  // register is staged through pinned memory, as on tcp and shm. Writes go
  // over shm or tcp under the put's grant, or, with rdma_store_pull_puts,
  // are pulled by the store over rdma after it checks the grant.
  std::string rdma_device;
  uint32_t rdma_port = 1;
  // GID table index, 0..255; -1: auto (InfiniBand: 0; RoCE: the first RoCE
  // v2 GID, an IPv4 or global one before a link-local one).
  int32_t rdma_gid_index = -1;
  // Traffic class (RoCE: DSCP << 2 | ECN, 0..255) and service level (0..15)
  // of this client's RDMA packets, for lossless fabric priorities; P_Key
  // table index of the port (the InfiniBand partition).
  uint32_t rdma_traffic_class = 0;
  uint32_t rdma_service_level = 0;
  uint32_t rdma_pkey_index = 0;
  // Puts to stores that offer rdma move as RDMA READs the store posts from
  // this client's memory, after checking the put's grant (docs/rdma.md).
  // The memory this client registers with the device is then readable by
  // the stores it connects to over rdma (docs/security.md). Off: puts go
  // over shm or tcp.
  bool rdma_store_pull_puts = false;
  // Stores (segment and incarnation) with an rdma queue pair at once; past
  // it the least recently used idle one is closed.
  uint32_t rdma_connections_max = 256;
  // GPU buffers registered with the RDMA device at once; past it a GPU
  // buffer is staged (counted in gpu_rdma_registration_failures).
  uint32_t rdma_gpu_registrations_max = 64;
  bool verify_checksums = true;  // check every block read against its checksum
  // Keys whose location (store, range, size, checksum, generation) the
  // client remembers, least recently used out first, so that a get of a
  // known block skips the master and asks its store directly. 0: off;
  // at most 16Mi. A cached read is always checksum-verified, whatever
  // verify_checksums says; docs/client.md ("Cached reads") says what it
  // guarantees.
  size_t location_cache_entries = 65536;
  // Streams to the master kept for the hot calls (put start, commit,
  // lookup): a call on an open stream costs about half a unary call's
  // round trip and CPU (docs/master.md, "Call streams"). Each is opened on
  // demand, carries one call at a time and closes after 10 s unused; a
  // call that finds them all busy, or a master that refuses streams, goes
  // unary. 0: every call unary; at most 64.
  size_t master_call_streams = 4;
  // TLS 1.3 on the data plane to stores run with --data-tls (off by
  // default): data_tls_ca is the PEM CA bundle that signed the stores'
  // certificates (required; a store's certificate must name the address
  // it advertises), data_tls_cert and data_tls_key a client certificate
  // for stores that require one (their --data-tls-ca); both or neither.
  // Shared memory is unaffected (it never leaves the host).
  bool data_tls = false;
  std::string data_tls_ca;
  std::string data_tls_cert;
  std::string data_tls_key;
  // With a cluster secret, every data-plane frame carries a session tag over
  // its header (docs/security.md, "Data-plane sessions"). true: ask every
  // store for tags over the payload bytes too (stores run with
  // --session-tag-payload have them for every client).
  bool session_tag_payload = false;
  std::string tls_ca;  // PEM file: use TLS to the master
  // PEM files: the client certificate and key presented to a master that
  // requires one (mutual TLS: its --tls-ca); both or neither.
  std::string tls_cert;
  std::string tls_key;
  // For an etcd:// master spec, PEM files securing the connection to etcd
  // (CA: talk TLS; certificate and key: etcd's --client-cert-auth), and a
  // file holding "USER:PASSWORD" for etcd's authentication. The key and user
  // files must not be readable by others. docs/security.md, "etcd".
  std::string etcd_ca;
  std::string etcd_cert;
  std::string etcd_key;
  std::string etcd_user_file;
  // Threads that move the blocks of batch calls in parallel, shared by every
  // call of this client: a batch of blocks on remote stores is read over up
  // to this many pooled connections at once. 1..256.
  uint32_t transfer_threads = 8;
  // TCP streams one large block moves over at once: a block of at least
  // 4 MiB to or from a remote store is cut into up to this many stripes
  // (each at least 2 MiB), each on its own pooled connection. 1..16; 1
  // moves every block on one connection.
  uint32_t tcp_streams_per_block = 4;
  // Threads that run the *Async calls, and how many such calls may wait for
  // one; a call beyond that completes at once with RESOURCE_EXHAUSTED.
  // async_threads 1..64, async_queue_max 1..65536.
  uint32_t async_threads = 4;
  uint32_t async_queue_max = 256;
};

// How a transfer between a registered GPU buffer and the cluster orders
// with the caller's CUDA work (docs/client.md, "GPU memory and stream
// ordering"). The handles are CUDA's, carried as void* so that this header
// needs no CUDA header: `stream` a cudaStream_t, `event` a cudaEvent_t, both
// on the device of the buffer; nullptr: not given. To name the legacy
// default stream pass cudaStreamLegacy (or cudaStreamPerThread), not 0.
//   Puts: the copy out of device memory starts after the work enqueued on
//     `stream` before the call, and after the work `event` captured (the
//     caller recorded it after writing the blocks). So a put may follow a
//     kernel that writes the blocks at once, without synchronizing.
//   Gets: the copy into device memory starts after the work enqueued on
//     `stream` before the call; `event` is recorded after the copy, and
//     work enqueued on `stream` after the call runs after the copy. With
//     either given the call returns once the copy is enqueued, not done:
//     the engine waits on its stream, not on the host. A failure of the
//     copy itself then shows on the caller's stream, as CUDA errors do.
// With neither given (the default) there is no ordering with the caller's
// streams: a put reads device memory as it is when the call starts (the
// caller must have synchronized its writes to it), and a get's bytes are in
// place when the call returns. A batch get (BatchGetInto) records `event`
// once, after every item's copy: on `stream` when given; without a stream
// each copy is done when the call returns. Ignored for host memory. For *Async calls
// the ordering is set up when the batch runs: a get's `stream` and `event`
// order work enqueued after the future is done.
struct GpuSync {
  void* stream = nullptr;
  void* event = nullptr;
};

// What the master's KV event stream (docs/events.md) reports for a block:
// routers hash tokens their own way, so an engine may name a block by its
// own hash and give its tokens. All optional; an empty one says nothing.
// `parent_key` is the Shelf key of the block before it in its prefix chain,
// kept by the master (shelfctl stat) and published as the parent's hash.
struct BlockEventInfo {
  std::string parent_key;
  bool has_engine_hash = false;
  uint64_t engine_hash = 0;  // published instead of the key's hash
  bool has_engine_parent_hash = false;
  uint64_t engine_parent_hash = 0;  // published instead of parent_key's hash
  uint32_t block_tokens = 0;        // tokens a block (vLLM's block_size)
  std::vector<uint32_t> token_ids;  // at most kBlockEventTokenIdsMax (shelf/limits.h)
  // The model its events' topic kv@<node>@<model> names: 1..kEventModelBytesMax
  // printable bytes without '@'. Empty: the model a vLLM-format key names,
  // else the master's --events-namespace.
  std::string model;
  bool empty() const {
    return parent_key.empty() && !has_engine_hash && !has_engine_parent_hash && block_tokens == 0 &&
           token_ids.empty() && model.empty();
  }
};

struct PutOptions {
  uint32_t replicas = 1;      // stores that get a copy, on distinct nodes (1..kReplicasMax)
  bool best_effort = false;   // accept fewer replicas than asked
  bool prefer_local = false;  // put a replica on this host when possible
  std::string spread_label;   // e.g. "zone": replicas on distinct label values
  // The key may hold other bytes: the put replaces them, in one step at its
  // commit (a new generation). Until then, and if the put fails, readers
  // get the old value; never a miss. A pinned key is not replaced
  // (FAILED_PRECONDITION). Without it, a put of an existing key is a
  // no-op that returns OK (content keys: the bytes are the same).
  bool replace = false;
  // Soft-pins the block at its commit for this long (0: no pin), as
  // shelfctl pin --ttl does: evicted only after every unpinned block of
  // its segment (docs/master.md, "Pins"), and a Remove without `force`
  // answers FAILED_PRECONDITION until it expires. A put of a key already
  // present commits nothing and changes no pin. Quotas: as a pin
  // (docs/security.md, `pinned=`, `pin_ttl=`).
  uint64_t soft_pin_ttl_ms = 0;
  // When the put must be done by. When left at the default, timeout_ms
  // applies (0: the client's default); otherwise `deadline` wins.
  Deadline deadline;
  uint64_t timeout_ms = 0;
  // Registered GPU buffers: what the copy out of device memory waits for.
  GpuSync gpu;
  // Put and PutFrom only: it describes one block, so the batch calls answer
  // INVALID_ARGUMENT when it is not empty (a batch takes one per item).
  BlockEventInfo block;
};

// A block to store. `data` must stay valid until the call returns (for
// BatchPutAsync: until its future is done).
struct PutItem {
  std::string key;
  const void* data = nullptr;
  size_t size = 0;
  BlockEventInfo block;  // what the event stream reports for it; optional
};

// Memory registered with RegisterBuffer, named by a process-unique id that is
// never reused: a handle used after UnregisterBuffer, or with another Client,
// is detected and answered INVALID_ARGUMENT. A default handle is invalid.
struct BufferHandle {
  uint64_t id = 0;
  bool valid() const { return id != 0; }
};

// Host memory a store on the same host copies puts from directly: `size`
// bytes (1 or more), zeroed, backed by a memfd sealed against shrinking and
// mapped read-write. A same-host put from anywhere else is copied twice
// (into the client's staging memory, then by the store into its segment);
// from here, once. Register it with RegisterBuffer like any host memory (an
// engine's KV pool), or put from it with Put. Thread-safe.
//   void* pool = nullptr;
//   Status s = AllocateSharedHostMemory(pool_bytes, &pool);
//   ...
//   FreeSharedHostMemory(pool);
// RESOURCE_EXHAUSTED when the memory cannot be had.
Status AllocateSharedHostMemory(size_t size, void** out);
// Frees what AllocateSharedHostMemory returned (INVALID_ARGUMENT for any
// other address). Unregister it first; a store's mapping of it goes at the
// client's next same-host put.
Status FreeSharedHostMemory(void* memory);

// A block to read into bytes [offset, offset + capacity) of a registered
// buffer.
struct GetIntoItem {
  std::string key;
  BufferHandle buffer;
  size_t offset = 0;
  size_t capacity = 0;
};

// A block read across several pieces of host memory, in order
// (Client::BatchGetIntoPieces): the first piece gets its first bytes, the
// next piece the bytes after, and so on. An engine's K and V segments of
// one block, far apart in its KV cache, are two pieces.
struct PiecesItem {
  std::string key;
  std::vector<std::pair<void*, size_t>> pieces;  // (address, bytes), 1 or more
};

// A block as Client::BatchGetViews hands it over: where its bytes lie for
// the length of the call.
struct BlockView {
  Status status;  // OK: [data, data + size) is the block; else why not
  const char* data = nullptr;
  size_t size = 0;
  // The bytes lie in a store's segment on this host, mapped read-only, not
  // in memory of the call: valid only until the callback's use_by time.
  bool in_place = false;
};

// A block to store from bytes [offset, offset + size) of a registered buffer.
struct PutFromItem {
  std::string key;
  BufferHandle buffer;
  size_t offset = 0;
  size_t size = 0;
  BlockEventInfo block;  // what the event stream reports for it; optional
};

// Transfer counters, for reports and metrics.
struct ClientStats {
  uint64_t bytes_stored = 0;      // written to stores (all replicas)
  uint64_t bytes_stored_shm = 0;  // of which through shared memory
  // Of bytes_stored_shm, copied into the client's staging memory first,
  // because they were not in shared host memory (AllocateSharedHostMemory):
  // those cost two copies, the rest one.
  uint64_t bytes_staged_shm = 0;
  // Bytes of same-host stores' segments read through in the background
  // after mapping (ClientOptions.warm_shm_bytes).
  uint64_t bytes_warmed_shm = 0;
  uint64_t bytes_stored_tcp = 0;
  uint64_t bytes_loaded = 0;      // read from stores
  uint64_t bytes_loaded_shm = 0;  // of which through shared memory
  uint64_t bytes_loaded_tcp = 0;
  uint64_t bytes_loaded_rdma = 0;
  uint64_t bytes_loaded_ssd = 0;  // of which served from an SSD tier
  uint64_t blocks_loaded_dram = 0;
  uint64_t blocks_loaded_ssd = 0;
  uint64_t checksum_mismatches = 0;
  uint64_t replica_failovers = 0;  // reads that moved on to another replica
  uint64_t bytes_staged_gpu = 0;   // moved through pinned bounce buffers (GPU memory)
  uint64_t bytes_stored_rdma = 0;  // of bytes_stored, pulled by stores over rdma
  // Of bytes_loaded_rdma, read by the RDMA device straight into GPU memory.
  uint64_t bytes_loaded_gpu_direct = 0;
  // Of bytes_loaded_gpu_direct, copied back from GPU memory to a pinned
  // host buffer to be checksummed (verify_checksums): GPUDirect spares the
  // inbound copy, not this one.
  uint64_t bytes_gpu_direct_checked = 0;
  // GPU buffers RegisterBuffer could not register with the RDMA device
  // (bound reached, no dmabuf or peer-memory support): those are staged.
  uint64_t gpu_rdma_registration_failures = 0;
  // Registered buffers the RDMA device holds now (host and GPU).
  uint64_t rdma_registered_buffers = 0;
  // Same-host stores whose shared memory this client refused or was refused
  // (peer uid, unsealed segment), each once per store incarnation; their
  // blocks move over tcp.
  uint64_t shm_refusals = 0;
  // The location cache (ClientOptions.location_cache_entries): keys read
  // without asking the master, keys it did not hold, cached reads that went
  // back to the master (replaced, moved, removed, unreachable), and the
  // keys it holds now.
  uint64_t location_cache_hits = 0;
  uint64_t location_cache_misses = 0;
  uint64_t location_cache_fallbacks = 0;
  uint64_t location_cache_entries = 0;
  // Of location_cache_hits, same-host DRAM blocks the store's key board
  // vouched for (transport/shm_board.h): read without a round trip to the
  // store.
  uint64_t location_cache_board_reads = 0;
  // BatchGetViews in place under a lease a recent call of this client took
  // and kept (a hot block: docs/client.md, "Hot blocks in place"), with no
  // round trip to the master.
  uint64_t views_on_kept_leases = 0;
  // Lookups the reads sent to the master, and the reads' lookups that went
  // in another thread's call instead of their own (made while it was out).
  uint64_t read_lookups = 0;
  uint64_t read_lookups_joined = 0;
  // Single puts (Put, PutFrom, a batch of one) from threads at once go to
  // the cluster together, as one batch: put_calls counts the batches sent
  // (each a start and a commit at the master) and the calls of puts made
  // again on their own (waiting for another writer's put of the key, or
  // after the master reclaimed theirs: a start and a commit each);
  // put_calls_joined the single puts that went in another thread's batch
  // instead of their own.
  uint64_t put_calls = 0;
  uint64_t put_calls_joined = 0;
};

namespace internal {
struct BatchState;
}  // namespace internal

// The result of an asynchronous batch call, ready once the batch has run.
// Move-only. Destroying (or assigning over) a future whose batch is still
// running waits for it to finish: a batch is never cancelled, and after its
// future is gone no byte of the caller's memory is touched any more.
// Not thread-safe: use one future from one thread at a time.
class BatchFuture {
 public:
  // An invalid future: done, with status FAILED_PRECONDITION.
  BatchFuture() = default;
  explicit BatchFuture(std::shared_ptr<internal::BatchState> state);
  BatchFuture(BatchFuture&& other) noexcept = default;
  BatchFuture& operator=(BatchFuture&& other) noexcept;
  BatchFuture(const BatchFuture&) = delete;
  BatchFuture& operator=(const BatchFuture&) = delete;
  ~BatchFuture();

  bool valid() const { return state_ != nullptr; }
  // True when the batch has finished. Never blocks.
  bool Poll() const;
  // Waits up to `timeout_ms` for the batch; true when it has finished.
  // Wait(0) is Poll(). The batch runs on whatever Wait answers.
  bool Wait(uint64_t timeout_ms) const;
  // Waits for the batch, without a limit (the batch itself has a deadline).
  void Wait() const;

  // The following wait for the batch to finish first.
  // The batch's status, as the synchronous form would return it.
  const Status& status() const;
  // One status per item, in the order given; empty when status() is not OK.
  const std::vector<Status>& statuses() const;
  // BatchGetAsync: the blocks (moved out with std::move(*f.values()) if
  // wanted); empty for other calls.
  std::vector<std::string>* values();
  // BatchGetIntoAsync: each block's size; empty for other calls.
  const std::vector<size_t>& sizes() const;

 private:
  std::shared_ptr<internal::BatchState> state_;
};

// A tier of a store.
enum class Tier : uint8_t { kDram = 1, kSsd = 2 };

// One store's share of a chain of blocks (Client::Locate).
struct NodeRun {
  std::string node_id;       // the store's --node-id
  std::string data_address;  // HOST:PORT of its data plane
  std::string host_id;       // its machine
  size_t blocks = 0;         // keys[0..blocks) all have a replica on it
  size_t dram_blocks = 0;    // keys[0..dram_blocks) all have one in its DRAM
  std::vector<Tier> tiers;   // per block of the run: kDram when a DRAM replica is there
};

class Client {
 public:
  // Connects to the master(s) (lazily: the first call makes the connection).
  // INVALID_ARGUMENT for no masters, a null `out` or an option outside its
  // range; NOT_FOUND when the tls_ca file cannot be read. A master that is
  // down or an address that does not resolve shows on the first call
  // (UNAVAILABLE), not here.
  static Status Open(const ClientOptions& options, std::unique_ptr<Client>* out);
  // Closes the client (see Close) and waits for its asynchronous calls.
  virtual ~Client() = default;

  // ------------------------------------------------------------ blocks

  // Stores a block. OK also when the key already exists (content keys make
  // the write unnecessary; the existing bytes stay). RESOURCE_EXHAUSTED when
  // the cluster has no room it can evict; INVALID_ARGUMENT for replicas
  // outside 1..8. A put that fails leaves nothing visible.
  virtual Status Put(const std::string& key, const void* data, size_t size,
                     const PutOptions& options = PutOptions()) = 0;
  // Reads a block into `out` (resized). NOT_FOUND on a miss; DATA_LOSS when
  // every replica failed its checksum.
  virtual Status Get(const std::string& key, std::string* out, Deadline deadline = Deadline()) = 0;
  // Reads a block into caller memory of `capacity` bytes; `size` (may be
  // null) gets the block size, also on OUT_OF_RANGE. NOT_FOUND on a miss;
  // OUT_OF_RANGE, nothing read, when the block is larger than `capacity`;
  // INVALID_ARGUMENT for a null buffer; DATA_LOSS as Get.
  virtual Status GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size,
                         Deadline deadline = Deadline()) = 0;
  // Batches: one master round trip for the metadata, then the blocks move in
  // parallel (ClientOptions::transfer_threads). `statuses` gets one status
  // per item, in order, each as the single-item call would return it.
  virtual Status BatchPut(const std::vector<PutItem>& items, std::vector<Status>* statuses,
                          const PutOptions& options = PutOptions()) = 0;
  // `values` gets the blocks (empty strings for items that failed). Reusing
  // one `values` vector across calls reuses its strings' memory.
  virtual Status BatchGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                          std::vector<Status>* statuses, Deadline deadline = Deadline()) = 0;
  // BatchGet holding at most `bytes_max` bytes of values together (0: no
  // bound), for callers with a memory bound (shelf-resp's MGET): an item
  // whose block would take the total past it fails with
  // RESOURCE_EXHAUSTED, and no memory is taken for it (a block's size is
  // known from the master's lookup, or the location cache, before then).
  virtual Status BatchGetAtMost(const std::vector<std::string>& keys, uint64_t bytes_max,
                                std::vector<std::string>* values, std::vector<Status>* statuses,
                                Deadline deadline = Deadline()) = 0;
  // Which keys are present (no lease taken; a present key may be evicted
  // before it is read).
  virtual Status Exists(const std::vector<std::string>& keys, std::vector<bool>* present,
                        Deadline deadline = Deadline()) = 0;
  // Removes a key. NOT_FOUND if absent; FAILED_PRECONDITION if pinned,
  // unless `force`.
  virtual Status Remove(const std::string& key, Deadline deadline = Deadline(),
                        bool force = false) = 0;
  // Removes 1..kBatchItemsMax keys in one master round trip. `statuses`
  // gets one status per key, in order, as Remove returns it (NOT_FOUND,
  // FAILED_PRECONDITION); the return is the call's own (INVALID_ARGUMENT for
  // a bad key or batch size, nothing removed; UNAVAILABLE, ...).
  virtual Status BatchRemove(const std::vector<std::string>& keys, std::vector<Status>* statuses,
                             Deadline deadline = Deadline(), bool force = false) = 0;
  // One page of a listing of the keys matching `pattern`: a glob (Redis's:
  // `*`, `?`, `[a-z]`, `[^a]`, `\x`) that must match the whole key, or with
  // `regex` an ECMAScript regular expression found anywhere in the key; ""
  // matches every key; at most 256 bytes. `keys` gets up to `count`
  // (1..1024) matching keys greater than `cursor` ("" for the first page),
  // in byte order; `next_cursor` gets the next page's cursor, "" when the
  // listing is complete. A key present for the whole listing is listed
  // exactly once. Each page scans the master's whole index: for tools and
  // front ends, not for an engine's hot path. INVALID_ARGUMENT: a bad
  // pattern or count, null outputs.
  virtual Status ListKeys(const std::string& cursor, const std::string& pattern, size_t count,
                          std::vector<std::string>* keys, std::string* next_cursor,
                          bool regex = false, Deadline deadline = Deadline()) = 0;
  // Removes every key matching `pattern` (as ListKeys; "" removes all keys),
  // leaving pinned keys unless `force`. `removed` (may be null) gets how
  // many keys were removed, also when the call fails part way (a deadline
  // passing between the master's bounded steps).
  virtual Status RemoveMatching(const std::string& pattern, uint64_t* removed, bool regex = false,
                                bool force = false, Deadline deadline = Deadline()) = 0;
  // Length of the longest run of leading keys present: the number of
  // prefix blocks already computed. A count only: no read lease is taken
  // (the get that follows takes its own), so a block may be evicted
  // between the match and its load; a load that misses means "compute it".
  virtual Status MatchPrefix(const std::vector<std::string>& keys, size_t* matched,
                             Deadline deadline = Deadline()) = 0;
  // Where the chain `keys` (1..1024 keys, in order) lives, for routing a
  // request to the node holding most of its prefix: per live store holding
  // keys[0], the leading run it holds and each block's tier, longest run
  // first. `cluster_blocks` (may be null) gets the leading run present
  // anywhere (as MatchPrefix's `matched`). Read-only: no lease is taken and
  // no block's LRU position moves.
  virtual Status Locate(const std::vector<std::string>& keys, std::vector<NodeRun>* nodes,
                        size_t* cluster_blocks = nullptr, Deadline deadline = Deadline()) = 0;

  // ------------------------------------------------ registered buffers

  // Registers [base, base + size) for the zero-copy calls below and returns
  // its handle. `gpu`: the memory is CUDA device memory; its blocks move
  // through pinned host bounce buffers (a CUDA runtime must be loadable).
  // Regions may overlap. The memory stays the caller's: it must stay valid
  // until UnregisterBuffer returns.
  // INVALID_ARGUMENT: null base, size 0, host memory registered as gpu or
  // device memory as host. UNIMPLEMENTED: gpu where no CUDA runtime
  // (libcudart) can be loaded. FAILED_PRECONDITION: gpu with no usable CUDA driver or device, or
  // the client is closed. RESOURCE_EXHAUSTED: over 4096 registrations.
  virtual Status RegisterBuffer(void* base, size_t size, BufferHandle* handle,
                                bool gpu = false) = 0;
  // Forgets a registration. Waits for calls already using the buffer to
  // finish (asynchronous ones included: their futures are then done);
  // after it returns the client never touches the memory again, except a
  // copy into GPU memory that a get with a GpuSync enqueued: it is ordered
  // before that GpuSync's stream and event, so wait on those before freeing.
  // INVALID_ARGUMENT when `handle` is not registered with this client.
  virtual Status UnregisterBuffer(BufferHandle handle) = 0;
  // Put from bytes [offset, offset + size) of a registered buffer, with no
  // intermediate copy for host memory. INVALID_ARGUMENT: handle not
  // registered (never, or unregistered already); OUT_OF_RANGE: the range is
  // not inside the registered buffer. Otherwise as Put.
  virtual Status PutFrom(const std::string& key, BufferHandle buffer, size_t offset, size_t size,
                         const PutOptions& options = PutOptions()) = 0;
  // Get into bytes [offset, offset + capacity) of a registered buffer.
  // INVALID_ARGUMENT: handle not registered; OUT_OF_RANGE: the range is not
  // inside the registered buffer, or the block is larger than `capacity`
  // (nothing read; `size` gets the block size). Otherwise as GetInto.
  // `gpu`: how the copy into a GPU buffer orders with the caller's stream
  // (GpuSync); the runtime's error (INTERNAL) when CUDA refuses it.
  virtual Status GetInto(const std::string& key, BufferHandle buffer, size_t offset,
                         size_t capacity, size_t* size, Deadline deadline = Deadline(),
                         const GpuSync& gpu = GpuSync()) = 0;
  // Batch forms of the two above, with per-item statuses as for BatchGet.
  // `sizes` (may be null) gets each block's size (0 for a miss).
  virtual Status BatchGetInto(const std::vector<GetIntoItem>& items, std::vector<Status>* statuses,
                              std::vector<size_t>* sizes, Deadline deadline = Deadline(),
                              const GpuSync& gpu = GpuSync()) = 0;
  virtual Status BatchPutFrom(const std::vector<PutFromItem>& items, std::vector<Status>* statuses,
                              const PutOptions& options = PutOptions()) = 0;
  // Reads item i's block across its pieces, in order (PiecesItem); pieces
  // larger than the block in total keep their tail. From a store on this
  // host the bytes are copied once, out of its mapped segment, straight
  // into the pieces; otherwise the block is read whole into scratch memory
  // and copied out. Per-item statuses as for BatchGet; OUT_OF_RANGE for a
  // block larger than its pieces (nothing written; `sizes` gets its size),
  // INVALID_ARGUMENT for a null piece or none. Host memory only.
  virtual Status BatchGetIntoPieces(const std::vector<PiecesItem>& items,
                                    std::vector<Status>* statuses, std::vector<size_t>* sizes,
                                    Deadline deadline = Deadline()) = 0;
  // Reads `keys` as BatchGet does, then calls `use` once, on this thread,
  // with views[i] for keys[i], and returns after it. A block of a store on
  // this host, in its DRAM, read under the lease of a fresh lookup, is not
  // copied: its view is the block where it lies in the store's mapped
  // segment (BlockView::in_place), checked against its checksum there, and
  // the lease is held until `use` returns. `use` must be done with such
  // bytes by `use_by_mono_ms` (std::chrono::steady_clock, in milliseconds
  // since its epoch: half the lease's time left when `use` is called);
  // after it they may be another
  // block's. Other blocks (over TCP, from an SSD tier, through a location
  // this client cached) are copied into memory the call owns, valid until
  // `use` returns; when every view is such, use_by_mono_ms is UINT64_MAX.
  // A front end sends the bytes on without a copy of its own (shelf-resp's
  // GET). The batch's failure (INVALID_ARGUMENT for a bad key, the lookup's
  // error) is returned without calling `use`; per-key errors are in the
  // views, as BatchGet's statuses. `bytes_max` (0: none) bounds the views'
  // bytes together, in place or copied, as BatchGetAtMost bounds its
  // values: a block that would take them past it is RESOURCE_EXHAUSTED in
  // its view (nothing read), its size known before.
  using ViewsFn = std::function<void(const std::vector<BlockView>& views, uint64_t use_by_mono_ms)>;
  virtual Status BatchGetViews(const std::vector<std::string>& keys, const ViewsFn& use,
                               Deadline deadline = Deadline(), uint64_t bytes_max = 0) = 0;
  // BatchGetViews for blocks this client reads without a round trip to
  // anyone: each key's location is cached (ClientOptions::
  // location_cache_entries), in the DRAM of a store on this host whose key
  // board this client has mapped (docs/client.md, "Cached reads"). Every
  // view is then a copy in memory of the call, checked against its
  // checksum, `use` is called as BatchGetViews calls it (use_by_mono_ms
  // UINT64_MAX), and OK returned. UNAVAILABLE, without calling `use`, when
  // any key is not such a block, or is one of more than `block_bytes_max`
  // bytes (which BatchGetViews leases anew and hands over in place, with
  // no copy but a round trip to the master), when their bytes together
  // pass `bytes_max` (0: none), or when a store's board no longer vouches
  // for one (its cache entry is dropped): the caller reads them with
  // BatchGetViews. It never waits on the network, so a front end may call
  // it on its event loop.
  static constexpr uint64_t kCachedViewBytesMax = (256 << 10) - 1;
  virtual Status BatchGetViewsCached(const std::vector<std::string>& keys, const ViewsFn& use,
                                     uint64_t bytes_max = 0,
                                     uint64_t block_bytes_max = kCachedViewBytesMax) = 0;

  // ------------------------------------------------------------ async

  // The batch calls, run on the client's async threads so the caller
  // overlaps them with compute. The deadline counts from this call (queueing
  // included). Errors the synchronous form would return come as the
  // future's status(); RESOURCE_EXHAUSTED when async_queue_max calls are
  // already waiting. Items are copied; the memory they point at (PutItem
  // data, registered buffers) must stay valid until the future is done, and
  // a registered buffer cannot be unregistered before that.
  virtual BatchFuture BatchGetAsync(std::vector<std::string> keys,
                                    Deadline deadline = Deadline()) = 0;
  virtual BatchFuture BatchPutAsync(std::vector<PutItem> items,
                                    const PutOptions& options = PutOptions()) = 0;
  virtual BatchFuture BatchGetIntoAsync(std::vector<GetIntoItem> items,
                                        Deadline deadline = Deadline(),
                                        const GpuSync& gpu = GpuSync()) = 0;
  virtual BatchFuture BatchPutFromAsync(std::vector<PutFromItem> items,
                                        const PutOptions& options = PutOptions()) = 0;

  // ------------------------------------------------------------ other

  virtual ClientStats stats() const = 0;
  // This client's metrics in the Prometheus text format 0.0.4
  // (docs/metrics.md: shelf_client_ops_total, shelf_client_op_seconds,
  // shelf_client_bytes_total, shelf_client_prefix_*), for the engine to
  // serve on its own /metrics endpoint.
  virtual std::string MetricsText() const = 0;
  // Ends the client: later calls answer FAILED_PRECONDITION, async calls not
  // yet started finish with FAILED_PRECONDITION, and calls in progress run
  // to their end. Idempotent.
  virtual void Close() = 0;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_CLIENT_H_
