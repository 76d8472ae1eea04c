// MooncakeStore: Mooncake Store's MooncakeDistributedStore over libshelf,
// with no Python in it: the class behind shelf.mooncake, bound by the
// pybind11 module (client/python/mooncake_binding.cc) and by the C API of
// shelf/mooncake.h that the wheel's ctypes layer calls. Blocks are bytes
// in and out (the bindings convert Python objects); no method touches the
// GIL, so the bindings release it around every call.
//
// Conventions are Mooncake's, not the `shelf` module's: no exceptions for
// store errors; ints, 0 on success and Mooncake's negative ErrorCode values
// on failure (kMc* below). Raw addresses passed to *_from / *_into calls
// must lie inside a buffer given to register_buffer. Every method, the
// codes it returns and where it differs from Mooncake: docs/mooncake-compat.md.
#ifndef SHELF_CLIENT_MOONCAKE_STORE_H_
#define SHELF_CLIENT_MOONCAKE_STORE_H_

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf::mooncake {

// Mooncake's ErrorCode values (mooncake-store/include/types.h).
constexpr int kMcOk = 0;
constexpr int kMcInternalError = -1;
constexpr int kMcBufferOverflow = -10;
constexpr int kMcNoAvailableHandle = -200;
constexpr int kMcInvalidKey = -400;
constexpr int kMcInvalidParams = -600;
constexpr int kMcObjectNotFound = -704;
constexpr int kMcObjectAlreadyExists = -705;
constexpr int kMcObjectHasLease = -706;
constexpr int kMcChecksumMismatch = -801;
constexpr int kMcRpcFail = -900;
constexpr int kMcRpcTimeout = -901;
constexpr int kMcNotSupported = -1012;

// Mooncake's defaults for setup's sizes (16 MiB each).
constexpr int64_t kDefaultSegmentBytes = int64_t{16} << 20;

// The Mooncake ErrorCode of a libshelf status (docs/mooncake-compat.md).
int ToMooncake(const Status& s);

// The keys of `keys` that pass ValidKeyLength, into `valid`, and the index
// of each in `keys`, into `where`.
void SelectValidKeys(const std::vector<std::string>& keys, std::vector<std::string>* valid,
                     std::vector<size_t>* where);

// Mooncake's SoftPinAction and ObjectDataType, with its values.
enum class SoftPinAction : int { kPreserve = 0, kEnable = 1, kDisable = 2 };
// A soft pin's lifetime when ENABLE names none: Mooncake's master default
// (--default_kv_soft_pin_ttl, 30 minutes).
constexpr uint64_t kDefaultSoftPinTtlMs = uint64_t{30} * 60 * 1000;
enum class ObjectDataType : int { kUnknown = 0, kKvCache = 1 };

// Mooncake's ReplicateConfig, its fields and defaults as Mooncake binds
// them (mooncake-store/include/replica.h). replica_num maps to
// PutOptions::replicas; preferred_segment naming this host asks for a local
// replica (prefer_local). ToPutOptions refuses what Mooncake refuses; the
// pin fields, data_type, group_ids and other segment names are accepted and
// have no effect (docs/mooncake-compat.md). with_soft_pin is the field of
// Mooncake releases before soft_pin_action, kept for their callers.
struct ReplicateConfig {
  int64_t replica_num = 1;
  int64_t nof_replica_num = 0;  // NVMe-oF replicas: Shelf has none
  int64_t dfs_replica_num = 0;  // replicas on a distributed file system: none
  bool with_soft_pin = false;
  int soft_pin_action = 0;                 // SoftPinAction: PRESERVE 0, ENABLE 1, DISABLE 2
  std::optional<int64_t> soft_pin_ttl_ms;  // None until set
  bool with_hard_pin = false;
  int data_type = 0;  // ObjectDataType: UNKNOWN 0, KVCACHE 1
  std::vector<std::string> preferred_segments;
  std::vector<std::string> preferred_nof_segments;
  std::string preferred_segment;
  bool prefer_alloc_in_same_node = false;
  // One group id per key of the put; None until set.
  std::optional<std::vector<std::string>> group_ids;
};

// Mooncake's setup keywords after its seven positional arguments (its
// store_py.cpp), with their defaults.
struct SetupExtras {
  bool enable_ssd_offload = false;
  std::string ssd_offload_path;
  std::string tenant_id = "default";
  bool enable_client_http_server = false;
  int64_t client_http_port = 9300;
};

// Mooncake's ReplicaStatus, with its values.
enum class ReplicaStatus : int {
  kUndefined = 0,
  kInitialized = 1,
  kProcessing = 2,
  kComplete = 3,
  kRemoved = 4,
  kFailed = 5
};

// One replica of a key as batch_get_replica_desc reports it (Mooncake's
// Replica::Descriptor): in a store's DRAM (a memory replica) or on its SSD
// tier (a disk replica). Shelf has no client-local disk replicas.
struct ReplicaDescriptor {
  bool memory = false;
  std::string node_id;             // the store holding it
  std::string transport_endpoint;  // that store's data-plane HOST:PORT
  ReplicaStatus status = ReplicaStatus::kComplete;
};

// Mooncake's MooncakeHostMemAllocator: host memory for an engine's KV pool,
// each allocation libshelf's shared host memory (AllocateSharedHostMemory:
// its own memfd, sealed against shrinking, mapped read-write and
// populated), so a same-host store copies puts from it directly. alloc
// returns the address as an int; free unmaps it. Every allocator of the
// process shares one table of allocations, as Mooncake's do; what is not
// freed goes with the process. Thread-safe.
class HostMemAllocator {
 public:
  // The address of `size` bytes (1 or more), zeroed; throws
  // std::runtime_error (Python's RuntimeError) when they cannot be had.
  uint64_t Alloc(int64_t size);
  // 0, or -1 for an address Alloc did not return.
  int Free(uint64_t address);
};

// A registered region: [base, base + size), its libshelf handle, and
// whether it is CUDA device memory (registered as a GPU buffer).
struct Region {
  size_t size = 0;
  BufferHandle handle;
  bool gpu = false;
};

// The master(s) named by Mooncake's master_server_addr ("HOST:PORT", a
// list separated by ',' or ';', or "etcd://HOST:PORT[;HOST:PORT][/CLUSTER]"),
// or by metadata_server when that names etcd and master_server_addr is
// empty. Empty when none is named.
std::vector<std::string> MasterList(const std::string& master_server_addr,
                                    const std::string& metadata_server);
// "16MB", "4 GB", "512KiB", "1048576": bytes (KB/MB/GB/TB are powers of
// 1024, as Mooncake reads them). False for anything else or an overflow.
bool ParseSize(const std::string& text, int64_t* out);

class MooncakeStore {
 public:
  MooncakeStore() = default;
  ~MooncakeStore() { Close(); }

  // setup(config): the dict form (Mooncake's JSON config keys:
  // local_hostname, metadata_server, global_segment_size and
  // local_buffer_size as decimal or "16MB"-style strings, protocol,
  // device_name, master_server_address), each value as its text (a
  // binding passes str() of each value that is not None). Keys Shelf has
  // no use for are ignored. Shelf's own: shelf_secret_file (the cluster
  // secret's file), shelf_credentials (a credentials file) and
  // shelf_principal (which of its principals; docs/security.md).
  int SetupConfig(const std::map<std::string, std::string>& config);
  // setup_dummy(mem_pool_size, local_buffer_size, server_address): a client
  // like any other (the node's shelf-store serves it over shared memory);
  // server_address names the master(s), as master_server_addr does.
  int SetupDummy(int64_t mem_pool_size, int64_t local_buffer_size,
                 const std::string& server_address);
  // setup(...), positional form. metadata_server is used when it names
  // etcd and master_server_addr does not.
  // Mooncake's eighth argument, `engine` (a Mooncake TransferEngine to
  // share), is accepted and unused: Shelf moves data with its own
  // transports. The keywords are Mooncake's (SetupExtras). Shelf's
  // credentials come from the environment (ShelfEnvironmentOptions).
  int Setup(const std::string& local_hostname, const std::string& metadata_server,
            int64_t global_segment_size, int64_t local_buffer_size, const std::string& protocol,
            const std::string& rdma_devices, const std::string& master_server_addr,
            const SetupExtras& extras = SetupExtras());
  // The same, from `base`'s credentials.
  int SetupWith(ClientOptions base, const std::string& local_hostname,
                const std::string& metadata_server, int64_t global_segment_size,
                int64_t local_buffer_size, const std::string& protocol,
                const std::string& rdma_devices, const std::string& master_server_addr,
                const SetupExtras& extras);

  int Close() ABSL_LOCKS_EXCLUDED(mu_);

  int HealthCheck();

  std::string Hostname() ABSL_LOCKS_EXCLUDED(mu_);

  // ------------------------------------------------------------ values

  // put, and put_parts with its parts joined: stores `size` bytes.
  int Put(const std::string& key, const char* data, size_t size, const ReplicateConfig& config) {
    return PutBytes(key, data, size, config);
  }

  // Remove, then put: not atomic (a reader between the two sees a miss).
  // A put that replaces the key's value in one step at its commit
  // (PutOptions.replace): readers never see it missing, and a failed
  // upsert leaves the old value.
  int Upsert(const std::string& key, const char* data, size_t size, const ReplicateConfig& config) {
    return PutBytes(key, data, size, config, /*replace=*/true);
  }

  // Stores values[i] ([data, data + size)) under keys[i]; the first
  // failure's code, else 0.
  int PutBatch(const std::vector<std::string>& keys,
               const std::vector<std::pair<const char*, size_t>>& values,
               const ReplicateConfig& config);

  // The block into *value: 0, or a negative code (a miss is
  // OBJECT_NOT_FOUND). Mooncake's get answers b"" for any failure.
  int Get(const std::string& key, std::string* value);

  // Fills `statuses` (pre-sized, preset to an error) and `values` for the
  // valid keys, in batches: get_batch and batch_get_buffer.
  void BatchGetValues(const std::vector<std::string>& keys, std::vector<std::string>* values,
                      std::vector<Status>* statuses);

  // 1 present, 0 absent, a negative code on error.
  int IsExist(const std::string& key);

  std::vector<int> BatchIsExist(const std::vector<std::string>& keys);

  // `force` is Mooncake's: it skips Mooncake's lease checks, which Shelf's
  // remove does not make; a key Shelf's admin pinned stays either way.
  int Remove(const std::string& key, bool force = false);

  // One master round trip per kBatchItemsMax valid keys; an invalid key
  // gets kMcInvalidKey without failing the others.
  std::vector<int> BatchRemove(const std::vector<std::string>& keys, bool force = false);

  // remove_all / remove_by_regex: the number of keys removed, or a negative
  // code. Pinned keys stay, as Mooncake keeps objects it may not remove.
  int64_t RemoveMatching(const std::string& pattern, bool regex, bool force = false);

  // Where each key's replicas are: per key present, one descriptor per
  // store holding it (DRAM: a memory replica; SSD: a disk replica). Keys
  // not found, or whose lookup failed, are left out, as in Mooncake.
  std::map<std::string, std::vector<ReplicaDescriptor>> BatchGetReplicaDesc(
      const std::vector<std::string>& keys);

  // The block's size, or a negative code. Reads the size without the bytes:
  // a get into one byte answers OUT_OF_RANGE with the size for any larger
  // block.
  int64_t GetSize(const std::string& key);

  // ------------------------------------------------ registered buffers

  int RegisterBuffer(uint64_t address, int64_t size) ABSL_LOCKS_EXCLUDED(mu_);

  int UnregisterBuffer(uint64_t address) ABSL_LOCKS_EXCLUDED(mu_);

  int64_t GetInto(const std::string& key, uint64_t address, int64_t size);

  // Bytes read per key, or a negative code.
  std::vector<int64_t> BatchGetInto(const std::vector<std::string>& keys,
                                    const std::vector<uint64_t>& addresses,
                                    const std::vector<int64_t>& sizes);

  int PutFrom(const std::string& key, uint64_t address, int64_t size,
              const ReplicateConfig& config);

  std::vector<int> BatchPutFrom(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& addresses,
                                const std::vector<int64_t>& sizes, const ReplicateConfig& config);

  // Block i is the concatenation of its pieces [ptrs[i][j], + sizes[i][j]).
  std::vector<int> BatchPutFromMulti(const std::vector<std::string>& keys,
                                     const std::vector<std::vector<uint64_t>>& all_ptrs,
                                     const std::vector<std::vector<int64_t>>& all_sizes,
                                     const ReplicateConfig& config);

  // Each block scattered over its pieces, in order; bytes read per key, or
  // a negative code.
  std::vector<int> BatchGetIntoMulti(const std::vector<std::string>& keys,
                                     const std::vector<std::vector<uint64_t>>& all_ptrs,
                                     const std::vector<std::vector<int64_t>>& all_sizes);

  // get_into_ranges: for buffer b, key k of it, range r: copies
  // [src_offsets[b][k][r], + sizes[b][k][r]) of the block to
  // buffers[b] + dst_offsets[b][k][r]. Bytes copied per range, or a
  // negative code.
  std::vector<std::vector<std::vector<int64_t>>> GetIntoRanges(
      const std::vector<uint64_t>& buffers, const std::vector<std::vector<std::string>>& keys,
      const std::vector<std::vector<std::vector<int64_t>>>& dst_offsets,
      const std::vector<std::vector<std::vector<int64_t>>>& src_offsets,
      const std::vector<std::vector<std::vector<int64_t>>>& sizes);

 private:
  // Opens a client with `options`, probes the master, and replaces the
  // current client on success.
  int Connect(const ClientOptions& options, const std::string& hostname, int64_t local_buffer_bytes)
      ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<Client> client() ABSL_LOCKS_EXCLUDED(mu_);

  // `config` for a put of `keys` keys: INVALID_PARAMS for what Mooncake
  // refuses, NOT_SUPPORTED for replicas Shelf has no tier for.
  int ToPutOptions(const ReplicateConfig& config, size_t keys, PutOptions* po);
  // The byte-buffer puts (put, put_batch, put_parts, upsert) go through
  // Mooncake's local buffer: with none (local_buffer_size 0) Mooncake
  // refuses them, and so does this layer. INVALID_PARAMS then, else OK.
  int CheckLocalBuffer() ABSL_LOCKS_EXCLUDED(mu_);

  int PutBytes(const std::string& key, const char* data, size_t size, const ReplicateConfig& config,
               bool replace = false);

  // The registered region holding [address, address + size): its handle
  // and the offset of `address` in it. INVALID_PARAMS when no registered
  // region holds the whole range, or with `host_only` (for the calls that
  // copy on the host: ranges) when it is device memory. `gpu` (may be
  // null) gets whether the region is device memory.
  int Locate(const std::string& key, uint64_t address, int64_t size, BufferHandle* handle,
             size_t* offset, bool host_only = false, bool* gpu = nullptr) ABSL_LOCKS_EXCLUDED(mu_);

  // The items of a single-buffer batch (GetIntoItem: size is the
  // capacity; PutFromItem: the block's size) whose ranges Locate finds,
  // and the index of each in `keys`, into `where`; each other key's code
  // into `out`.
  template <typename Item, typename Code>
  void LocateAll(const std::vector<std::string>& keys, const std::vector<uint64_t>& addresses,
                 const std::vector<int64_t>& sizes, std::vector<Item>* items,
                 std::vector<size_t>* where, std::vector<Code>* out) {
    for (size_t i = 0; i < keys.size(); ++i) {
      Item item;
      int rc = Locate(keys[i], addresses[i], sizes[i], &item.buffer, &item.offset);
      if (rc != kMcOk) {
        (*out)[i] = rc;
        continue;
      }
      item.key = keys[i];
      if constexpr (std::is_same_v<Item, GetIntoItem>) {
        item.capacity = static_cast<size_t>(sizes[i]);
      } else {
        item.size = static_cast<size_t>(sizes[i]);
      }
      items->push_back(std::move(item));
      where->push_back(i);
    }
  }

  // The pieces of a multi-buffer block: one size per pointer, each piece
  // inside a registered region, all host memory or all device memory
  // (*device says which).
  int CheckPieces(const std::string& key, const std::vector<uint64_t>& ptrs,
                  const std::vector<int64_t>& sizes, bool* device);

  Mutex mu_;
  std::shared_ptr<Client> client_ ABSL_GUARDED_BY(mu_);      // null: not set up
  std::map<uint64_t, Region> regions_ ABSL_GUARDED_BY(mu_);  // by base address
  std::string hostname_ ABSL_GUARDED_BY(mu_);
  int64_t local_buffer_bytes_ ABSL_GUARDED_BY(mu_) = 0;
};

}  // namespace shelf::mooncake

#endif  // SHELF_CLIENT_MOONCAKE_STORE_H_
