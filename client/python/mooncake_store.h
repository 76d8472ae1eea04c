// MooncakeStore: Mooncake Store's MooncakeDistributedStore over libshelf,
// the class behind shelf.mooncake (mooncake_binding.cc binds it).
//
// Conventions are Mooncake's, not the `shelf` module's: no exceptions for
// store errors; ints, 0 on success and Mooncake's negative ErrorCode values
// on failure (kMc* below). Raw addresses passed to *_from / *_into calls
// must lie inside a buffer given to register_buffer. Every method, the
// codes it returns and where it differs from Mooncake: docs/mooncake-compat.md.
#ifndef SHELF_CLIENT_PYTHON_MOONCAKE_STORE_H_
#define SHELF_CLIENT_PYTHON_MOONCAKE_STORE_H_

#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "client/python/module.h"
#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf::python::mooncake {

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

inline int ToMooncake(const Status& s) {
  switch (s.code()) {
    case StatusCode::kOk:
      return kMcOk;
    case StatusCode::kNotFound:
      return kMcObjectNotFound;
    case StatusCode::kAlreadyExists:
      return kMcObjectAlreadyExists;
    case StatusCode::kFailedPrecondition:  // pinned, or read-leased
      return kMcObjectHasLease;
    case StatusCode::kInvalidArgument:
      return kMcInvalidParams;
    case StatusCode::kOutOfRange:  // a block larger than the buffer
      return kMcBufferOverflow;
    case StatusCode::kResourceExhausted:
      return kMcNoAvailableHandle;
    case StatusCode::kDataLoss:
      return kMcChecksumMismatch;
    case StatusCode::kUnavailable:
      return kMcRpcFail;
    case StatusCode::kDeadlineExceeded:
      return kMcRpcTimeout;
    case StatusCode::kUnimplemented:
      return kMcNotSupported;
    default:
      return kMcInternalError;
  }
}

inline bool ValidKey(const std::string& key) { return !key.empty() && key.size() <= kKeyBytesMax; }

// The keys of `keys` that pass ValidKey, into `valid`, and the index of
// each in `keys`, into `where`.
inline void SelectValidKeys(const std::vector<std::string>& keys, std::vector<std::string>* valid,
                            std::vector<size_t>* where) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!ValidKey(keys[i])) continue;
    valid->push_back(keys[i]);
    where->push_back(i);
  }
}

// Mooncake's SoftPinAction and ObjectDataType, with its values.
enum class SoftPinAction : int { kPreserve = 0, kEnable = 1, kDisable = 2 };
enum class ObjectDataType : int { kUnknown = 0, kKvCache = 1 };

// Mooncake's ReplicateConfig. replica_num maps to PutOptions::replicas;
// preferred_segment naming this host and prefer_alloc_in_same_node ask for
// a local replica (prefer_local); the pin fields, data_type and other
// segment names are accepted and have no effect (a cache block is evicted
// by LRU; Shelf pins through its admin API).
struct ReplicateConfig {
  int64_t replica_num = 1;
  bool with_soft_pin = false;
  int soft_pin_action = 0;  // SoftPinAction: PRESERVE 0, ENABLE 1, DISABLE 2
  int64_t soft_pin_ttl_ms = 0;
  bool with_hard_pin = false;
  int data_type = 0;  // ObjectDataType: UNKNOWN 0, KVCACHE 1
  std::vector<std::string> preferred_segments;
  std::string preferred_segment;
  bool prefer_alloc_in_same_node = false;
};

// A block read with get_buffer: owns its bytes; ptr() / size() / the buffer
// protocol, as Mooncake's BufferHandle.
struct ReadBuffer {
  std::string bytes;
};

// A registered region: [base, base + size) and its libshelf handle.
struct Region {
  size_t size = 0;
  BufferHandle handle;
};

// Runs fn(begin, end) over [0, n) in slices of at most kBatchItemsMax.
template <typename Fn>
void ForEachSlice(size_t n, Fn fn) {
  for (size_t begin = 0; begin < n; begin += kBatchItemsMax) {
    fn(begin, std::min(n, begin + kBatchItemsMax));
  }
}

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
  // local_buffer_size as ints or "16MB"-style strings, protocol,
  // device_name, master_server_address). Keys Shelf has no use for are
  // ignored. Shelf's own: shelf_secret_file (the cluster secret's file),
  // shelf_credentials (a credentials file) and shelf_principal (which of
  // its principals; docs/security.md).
  int SetupConfig(const py::dict& config);
  // setup_dummy(mem_pool_size, local_buffer_size, server_address): a client
  // like any other (the node's shelf-store serves it over shared memory);
  // server_address names the master(s), as master_server_addr does.
  int SetupDummy(int64_t mem_pool_size, int64_t local_buffer_size,
                 const std::string& server_address);
  // setup(...), positional form. metadata_server is used when it names
  // etcd and master_server_addr does not.
  int Setup(const std::string& local_hostname, const std::string& metadata_server,
            int64_t global_segment_size, int64_t local_buffer_size, const std::string& protocol,
            const std::string& rdma_devices, const std::string& master_server_addr);
  // The same, from `base`'s credentials.
  int SetupWith(ClientOptions base, const std::string& local_hostname,
                const std::string& metadata_server, int64_t global_segment_size,
                int64_t local_buffer_size, const std::string& protocol,
                const std::string& rdma_devices, const std::string& master_server_addr);

  int Close() ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<Client> client;
    {
      MutexLock lock(&mu_);
      client = std::move(client_);
      client_.reset();
      regions_.clear();
    }
    if (client != nullptr) {
      py::gil_scoped_release nogil;
      client->Close();
      client.reset();
    }
    return kMcOk;
  }

  int HealthCheck() {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return kMcInvalidParams;
    std::vector<bool> present;
    py::gil_scoped_release nogil;
    return ToMooncake(c->Exists({"\x01shelf-mooncake-probe"}, &present));
  }

  std::string Hostname() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return hostname_;
  }

  // ------------------------------------------------------------ values

  int Put(const std::string& key, py::handle value, const ReplicateConfig& config) {
    BufferView v(value, /*writable=*/false);
    return PutBytes(key, v.data(), v.size(), config);
  }

  // put_parts(key, *parts, config=ReplicateConfig()): the parts are joined
  // into one block.
  int PutParts(const py::args& args, const py::kwargs& kwargs) {
    if (args.size() < 1) return kMcInvalidParams;
    ReplicateConfig config;
    if (kwargs.contains("config")) config = kwargs["config"].cast<ReplicateConfig>();
    std::string key = args[0].cast<std::string>();
    std::string joined;
    for (size_t i = 1; i < args.size(); ++i) {
      BufferView v(args[i], /*writable=*/false);
      joined.append(v.data(), v.size());
    }
    return PutBytes(key, joined.data(), joined.size(), config);
  }

  // Remove, then put: not atomic (a reader between the two sees a miss).
  // A put that replaces the key's value in one step at its commit
  // (PutOptions.replace): readers never see it missing, and a failed
  // upsert leaves the old value.
  int Upsert(const std::string& key, py::handle value, const ReplicateConfig& config) {
    BufferView v(value, /*writable=*/false);
    return PutBytes(key, v.data(), v.size(), config, /*replace=*/true);
  }

  int PutBatch(const std::vector<std::string>& keys, const std::vector<py::object>& values,
               const ReplicateConfig& config) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr || keys.size() != values.size()) return kMcInvalidParams;
    PutOptions po;
    if (int rc = ToPutOptions(config, &po); rc != kMcOk) return rc;
    std::vector<BufferView> views;
    std::vector<PutItem> items;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!ValidKey(keys[i])) return kMcInvalidKey;
      views.emplace_back(values[i], /*writable=*/false);
      items.push_back(PutItem{keys[i], views.back().data(), views.back().size()});
    }
    int rc = kMcOk;
    py::gil_scoped_release nogil;
    ForEachSlice(items.size(), [&](size_t b, size_t e) {
      if (rc != kMcOk) return;
      std::vector<PutItem> slice(items.begin() + b, items.begin() + e);
      std::vector<Status> st;
      Status s = c->BatchPut(slice, &st, po);
      if (!s.ok()) {
        rc = ToMooncake(s);
        return;
      }
      for (const Status& x : st) {
        if (!x.ok()) {
          rc = ToMooncake(x);
          return;
        }
      }
    });
    return rc;
  }

  py::bytes Get(const std::string& key) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr || !ValidKey(key)) return py::bytes();
    std::string value;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->Get(key, &value);
    }
    return s.ok() ? ToBytes(value) : py::bytes();
  }

  // The blocks, b"" for a miss (or every item when the batch failed).
  py::list GetBatch(const std::vector<std::string>& keys) {
    std::vector<std::string> values(keys.size());
    std::vector<Status> statuses(keys.size(), Status(StatusCode::kInvalidArgument, "bad key"));
    BatchGetValues(keys, &values, &statuses);
    py::list out;
    for (size_t i = 0; i < keys.size(); ++i) {
      out.append(statuses[i].ok() ? ToBytes(values[i]) : py::bytes());
    }
    return out;
  }

  py::object GetBuffer(const std::string& key) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr || !ValidKey(key)) return py::none();
    auto buffer = std::make_shared<ReadBuffer>();
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->Get(key, &buffer->bytes);
    }
    if (!s.ok()) return py::none();
    return py::cast(buffer);
  }

  py::list BatchGetBuffer(const std::vector<std::string>& keys) {
    std::vector<std::string> values(keys.size());
    std::vector<Status> statuses(keys.size(), Status(StatusCode::kInvalidArgument, "bad key"));
    BatchGetValues(keys, &values, &statuses);
    py::list out;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (!statuses[i].ok()) {
        out.append(py::none());
        continue;
      }
      auto buffer = std::make_shared<ReadBuffer>();
      buffer->bytes = std::move(values[i]);
      out.append(py::cast(buffer));
    }
    return out;
  }

  // 1 present, 0 absent, a negative code on error.
  int IsExist(const std::string& key) {
    std::vector<int> r = BatchIsExist({key});
    return r[0];
  }

  std::vector<int> BatchIsExist(const std::vector<std::string>& keys) {
    std::vector<int> out(keys.size(), kMcInvalidParams);
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return out;
    std::vector<std::string> valid;
    std::vector<size_t> where;
    for (size_t i = 0; i < keys.size(); ++i) {
      if (ValidKey(keys[i])) {
        valid.push_back(keys[i]);
        where.push_back(i);
      } else {
        out[i] = kMcInvalidKey;
      }
    }
    py::gil_scoped_release nogil;
    ForEachSlice(valid.size(), [&](size_t b, size_t e) {
      std::vector<std::string> slice(valid.begin() + b, valid.begin() + e);
      std::vector<bool> present;
      Status s = c->Exists(slice, &present);
      for (size_t i = b; i < e; ++i) {
        out[where[i]] = s.ok() ? (present[i - b] ? 1 : 0) : ToMooncake(s);
      }
    });
    return out;
  }

  int Remove(const std::string& key) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return kMcInvalidParams;
    if (!ValidKey(key)) return kMcInvalidKey;
    py::gil_scoped_release nogil;
    return ToMooncake(c->Remove(key));
  }

  // One master round trip per kBatchItemsMax valid keys; an invalid key
  // gets kMcInvalidKey without failing the others.
  std::vector<int> BatchRemove(const std::vector<std::string>& keys) {
    std::vector<int> out(keys.size(), kMcInvalidKey);
    std::shared_ptr<Client> c = client();
    if (c == nullptr) {
      std::fill(out.begin(), out.end(), kMcInvalidParams);
      return out;
    }
    std::vector<std::string> valid;
    std::vector<size_t> where;
    SelectValidKeys(keys, &valid, &where);
    py::gil_scoped_release nogil;
    ForEachSlice(valid.size(), [&](size_t b, size_t e) {
      std::vector<std::string> slice(valid.begin() + b, valid.begin() + e);
      std::vector<Status> st;
      Status s = c->BatchRemove(slice, &st);
      for (size_t i = b; i < e; ++i) out[where[i]] = ToMooncake(s.ok() ? st[i - b] : s);
    });
    return out;
  }

  // remove_all / remove_by_regex: the number of keys removed, or a negative
  // code. Pinned keys stay, as Mooncake keeps objects it may not remove.
  int64_t RemoveMatching(const std::string& pattern, bool regex) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return kMcInvalidParams;
    uint64_t removed = 0;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->RemoveMatching(pattern, &removed, regex);
    }
    if (!s.ok()) return ToMooncake(s);
    return static_cast<int64_t>(removed);
  }

  // The block's size, or a negative code. Reads the size without the bytes:
  // a get into one byte answers OUT_OF_RANGE with the size for any larger
  // block.
  int64_t GetSize(const std::string& key) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return kMcInvalidParams;
    if (!ValidKey(key)) return kMcInvalidKey;
    char probe = 0;
    size_t size = 0;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->GetInto(key, &probe, 1, &size);
    }
    if (s.ok() || s.code() == StatusCode::kOutOfRange) return static_cast<int64_t>(size);
    return ToMooncake(s);
  }

  // ------------------------------------------------ registered buffers

  int RegisterBuffer(uint64_t address, int64_t size) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr || address == 0 || size <= 0) return kMcInvalidParams;
    {
      MutexLock lock(&mu_);
      if (regions_.count(address) != 0) return kMcInvalidParams;
    }
    BufferHandle h;
    Status s;
    {
      py::gil_scoped_release nogil;
      s = c->RegisterBuffer(reinterpret_cast<void*>(address), static_cast<size_t>(size), &h);
    }
    if (!s.ok()) return ToMooncake(s);
    MutexLock lock(&mu_);
    regions_[address] = Region{static_cast<size_t>(size), h};
    return kMcOk;
  }

  int UnregisterBuffer(uint64_t address) ABSL_LOCKS_EXCLUDED(mu_) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return kMcInvalidParams;
    BufferHandle h;
    {
      MutexLock lock(&mu_);
      auto it = regions_.find(address);
      if (it == regions_.end()) return kMcInvalidParams;
      h = it->second.handle;
      regions_.erase(it);
    }
    py::gil_scoped_release nogil;
    return ToMooncake(c->UnregisterBuffer(h));
  }

  int64_t GetInto(const std::string& key, uint64_t address, int64_t size) {
    std::vector<int64_t> r = BatchGetInto({key}, {address}, {size});
    return r[0];
  }

  // Bytes read per key, or a negative code.
  std::vector<int64_t> BatchGetInto(const std::vector<std::string>& keys,
                                    const std::vector<uint64_t>& addresses,
                                    const std::vector<int64_t>& sizes) {
    std::vector<int64_t> out(keys.size(), kMcInvalidParams);
    std::shared_ptr<Client> c = client();
    if (c == nullptr || addresses.size() != keys.size() || sizes.size() != keys.size()) {
      return out;
    }
    std::vector<GetIntoItem> items;
    std::vector<size_t> where;
    for (size_t i = 0; i < keys.size(); ++i) {
      GetIntoItem item;
      int rc = Locate(keys[i], addresses[i], sizes[i], &item.buffer, &item.offset);
      if (rc != kMcOk) {
        out[i] = rc;
        continue;
      }
      item.key = keys[i];
      item.capacity = static_cast<size_t>(sizes[i]);
      items.push_back(std::move(item));
      where.push_back(i);
    }
    py::gil_scoped_release nogil;
    ForEachSlice(items.size(), [&](size_t b, size_t e) {
      std::vector<GetIntoItem> slice(items.begin() + b, items.begin() + e);
      std::vector<Status> st;
      std::vector<size_t> got;
      Status s = c->BatchGetInto(slice, &st, &got);
      for (size_t i = b; i < e; ++i) {
        if (!s.ok()) {
          out[where[i]] = ToMooncake(s);
        } else if (st[i - b].ok()) {
          out[where[i]] = static_cast<int64_t>(got[i - b]);
        } else {
          out[where[i]] = ToMooncake(st[i - b]);
        }
      }
    });
    return out;
  }

  int PutFrom(const std::string& key, uint64_t address, int64_t size,
              const ReplicateConfig& config) {
    std::vector<int> r = BatchPutFrom({key}, {address}, {size}, config);
    return r[0];
  }

  std::vector<int> BatchPutFrom(const std::vector<std::string>& keys,
                                const std::vector<uint64_t>& addresses,
                                const std::vector<int64_t>& sizes, const ReplicateConfig& config) {
    std::vector<int> out(keys.size(), kMcInvalidParams);
    std::shared_ptr<Client> c = client();
    if (c == nullptr || addresses.size() != keys.size() || sizes.size() != keys.size()) {
      return out;
    }
    PutOptions po;
    if (int rc = ToPutOptions(config, &po); rc != kMcOk) {
      std::fill(out.begin(), out.end(), rc);
      return out;
    }
    std::vector<PutFromItem> items;
    std::vector<size_t> where;
    for (size_t i = 0; i < keys.size(); ++i) {
      PutFromItem item;
      int rc = Locate(keys[i], addresses[i], sizes[i], &item.buffer, &item.offset);
      if (rc != kMcOk) {
        out[i] = rc;
        continue;
      }
      item.key = keys[i];
      item.size = static_cast<size_t>(sizes[i]);
      items.push_back(std::move(item));
      where.push_back(i);
    }
    py::gil_scoped_release nogil;
    ForEachSlice(items.size(), [&](size_t b, size_t e) {
      std::vector<PutFromItem> slice(items.begin() + b, items.begin() + e);
      std::vector<Status> st;
      Status s = c->BatchPutFrom(slice, &st, po);
      for (size_t i = b; i < e; ++i) out[where[i]] = ToMooncake(s.ok() ? st[i - b] : s);
    });
    return out;
  }

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
  int Connect(const ClientOptions& options, const std::string& hostname) ABSL_LOCKS_EXCLUDED(mu_);

  std::shared_ptr<Client> client() ABSL_LOCKS_EXCLUDED(mu_) {
    MutexLock lock(&mu_);
    return client_;
  }

  int ToPutOptions(const ReplicateConfig& config, PutOptions* po) {
    if (config.replica_num < 1 || config.replica_num > static_cast<int64_t>(kReplicasMax))
      return kMcInvalidParams;
    po->replicas = static_cast<uint32_t>(config.replica_num);
    std::string host = Hostname();
    po->prefer_local =
        config.prefer_alloc_in_same_node || (!host.empty() && config.preferred_segment == host);
    return kMcOk;
  }

  int PutBytes(const std::string& key, const char* data, size_t size, const ReplicateConfig& config,
               bool replace = false) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return kMcInvalidParams;
    if (!ValidKey(key)) return kMcInvalidKey;
    if (size == 0) return kMcInvalidParams;
    PutOptions po;
    if (int rc = ToPutOptions(config, &po); rc != kMcOk) return rc;
    po.replace = replace;
    py::gil_scoped_release nogil;
    return ToMooncake(c->Put(key, data, size, po));
  }

  // Fills `statuses` (pre-sized, preset to an error) and `values` for the
  // valid keys, in batches.
  void BatchGetValues(const std::vector<std::string>& keys, std::vector<std::string>* values,
                      std::vector<Status>* statuses) {
    std::shared_ptr<Client> c = client();
    if (c == nullptr) return;
    std::vector<std::string> valid;
    std::vector<size_t> where;
    SelectValidKeys(keys, &valid, &where);
    py::gil_scoped_release nogil;
    ForEachSlice(valid.size(), [&](size_t b, size_t e) {
      std::vector<std::string> slice(valid.begin() + b, valid.begin() + e);
      std::vector<std::string> got;
      std::vector<Status> st;
      Status s = c->BatchGet(slice, &got, &st);
      for (size_t i = b; i < e; ++i) {
        (*statuses)[where[i]] = s.ok() ? st[i - b] : s;
        if (s.ok() && st[i - b].ok()) (*values)[where[i]] = std::move(got[i - b]);
      }
    });
  }

  // The registered region holding [address, address + size): its handle
  // and the offset of `address` in it. INVALID_PARAMS when no registered
  // region holds the whole range.
  int Locate(const std::string& key, uint64_t address, int64_t size, BufferHandle* handle,
             size_t* offset) ABSL_LOCKS_EXCLUDED(mu_) {
    if (!ValidKey(key)) return kMcInvalidKey;
    if (size <= 0 || address == 0) return kMcInvalidParams;
    MutexLock lock(&mu_);
    auto it = regions_.upper_bound(address);
    if (it == regions_.begin()) return kMcInvalidParams;
    --it;
    uint64_t off = address - it->first;
    if (off > it->second.size || static_cast<uint64_t>(size) > it->second.size - off) {
      return kMcInvalidParams;
    }
    *handle = it->second.handle;
    *offset = static_cast<size_t>(off);
    return kMcOk;
  }

  // The pieces of a multi-buffer block: one size per pointer, each piece
  // inside a registered region.
  int CheckPieces(const std::string& key, const std::vector<uint64_t>& ptrs,
                  const std::vector<int64_t>& sizes) {
    if (!ValidKey(key)) return kMcInvalidKey;
    if (ptrs.empty() || ptrs.size() != sizes.size()) return kMcInvalidParams;
    for (size_t j = 0; j < ptrs.size(); ++j) {
      BufferHandle h;
      size_t off = 0;
      if (int rc = Locate(key, ptrs[j], sizes[j], &h, &off); rc != kMcOk) return rc;
    }
    return kMcOk;
  }

  Mutex mu_;
  std::shared_ptr<Client> client_ ABSL_GUARDED_BY(mu_);      // null: not set up
  std::map<uint64_t, Region> regions_ ABSL_GUARDED_BY(mu_);  // by base address
  std::string hostname_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::python::mooncake

#endif  // SHELF_CLIENT_PYTHON_MOONCAKE_STORE_H_
