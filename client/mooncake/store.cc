// MooncakeStore: the bodies of mooncake_store.h's declarations.
#include "client/mooncake/store.h"

#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "client/absl_status.h"
#include "client/binding_options.h"
#include "client/cuda_runtime.h"
#include "client/memory_batch.h"
#include "client/testing_hooks.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "common/secret_file.h"

namespace shelf::mooncake {

namespace {

// Mooncake's HA form "etcd://HOST:PORT[;HOST:PORT...]" as libshelf's
// "etcd://HOST:PORT[,HOST:PORT...]/CLUSTER": ';' separates endpoints too,
// and a spec without "/CLUSTER" names the masters' default cluster.
std::string EtcdSpec(const std::string& spec) {
  std::string out = spec;
  std::replace(out.begin(), out.end(), ';', ',');
  if (out.find('/', std::strlen("etcd://")) == std::string::npos) out += "/default";
  return out;
}

bool IsEtcd(const std::string& s) { return s.rfind("etcd://", 0) == 0; }

}  // namespace

int ToMooncake(const Status& s) {
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

void SelectValidKeys(const std::vector<std::string>& keys, std::vector<std::string>* valid,
                     std::vector<size_t>* where) {
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!ValidKeyLength(keys[i].size())) continue;
    valid->push_back(keys[i]);
    where->push_back(i);
  }
}

std::vector<std::string> MasterList(const std::string& master_server_addr,
                                    const std::string& metadata_server) {
  // Shelf's masters are found through etcd when either address names it:
  // master_server_addr first; metadata_server (Mooncake's transfer-engine
  // metadata, often etcd) when master_server_addr is empty.
  if (IsEtcd(master_server_addr)) return {EtcdSpec(master_server_addr)};
  if (master_server_addr.empty() && IsEtcd(metadata_server)) return {EtcdSpec(metadata_server)};
  return SplitMasters(master_server_addr, ",;");
}

namespace {

// Multi-buffer blocks are gathered from, or scattered to, their pieces
// through this thread's scratch memory, kept from call to call so that a
// warm call faults no page in; a run of keys uses at most this much of it.
constexpr size_t kScratchBytesMax = size_t{64} << 20;

char* ThreadScratch(size_t bytes) {
  thread_local std::vector<char> scratch;
  if (scratch.size() < bytes) scratch.resize(bytes);
  return scratch.data();
}

// The bytes of the block whose pieces are `sizes`.
size_t TotalOf(const std::vector<int64_t>& sizes) {
  size_t total = 0;
  for (int64_t n : sizes) total += static_cast<size_t>(n);
  return total;
}

// Cuts keys [0, n) into runs of at most kBatchItemsMax whose scratch bytes
// stay within kScratchBytesMax (a larger key gets a run of its own), and
// calls run(begin, end, offsets, scratch_bytes) for each: offsets[i - begin]
// is key i's offset in the scratch, or SIZE_MAX for a key that moves
// straight from or to its one piece (`straight(i)`). `pieces(i)` are key
// i's piece sizes.
template <typename Pieces, typename Straight, typename Run>
void ForEachScratchRun(size_t n, Pieces pieces, Straight straight, Run run) {
  for (size_t begin = 0; begin < n;) {
    std::vector<size_t> offsets;
    size_t scratch_bytes = 0, end = begin;
    for (; end < n && end - begin < kBatchItemsMax; ++end) {
      if (straight(end)) {
        offsets.push_back(SIZE_MAX);
        continue;
      }
      const size_t total = TotalOf(pieces(end));
      if (scratch_bytes > 0 && scratch_bytes + total > kScratchBytesMax) break;
      offsets.push_back(scratch_bytes);
      scratch_bytes += total;
    }
    run(begin, end, offsets, scratch_bytes);
    begin = end;
  }
}

// The CUDA runtime the layer asks and copies with (a test's simulated one
// when set: client/testing_hooks.h).
CudaRuntime* Cuda() {
  return internal::CudaForTesting() != nullptr ? internal::CudaForTesting()
                                               : CudaRuntime::Default();
}

// Whether `address` is CUDA device memory, as the client's CUDA runtime
// tells (in a build without CUDA, the driver the process loaded, if any:
// client/cuda_runtime.cc).
bool IsDeviceMemory(uint64_t address) {
  CudaRuntime::PointerInfo info;
  return Cuda()->PointerAttributes(reinterpret_cast<const void*>(address), &info).ok() &&
         info.type == CudaRuntime::MemoryType::kDevice;
}

// Shelf's credentials for the positional setup and setup_dummy, whose
// arguments are Mooncake's alone: SHELF_SECRET_FILE (the cluster secret's
// file), SHELF_CREDENTIALS (a credentials file) and SHELF_PRINCIPAL (which
// of its principals). INVALID_PARAMS for a secret file it cannot read.
int ShelfEnvironmentOptions(ClientOptions* o) {
  auto env = [](const char* name) {
    const char* v = std::getenv(name);
    return std::string(v == nullptr ? "" : v);
  };
  if (std::string secret_file = env("SHELF_SECRET_FILE"); !secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(secret_file);
    if (!secret.ok()) return kMcInvalidParams;
    o->secret = *std::move(secret);
  }
  o->credentials_file = env("SHELF_CREDENTIALS");
  o->principal = env("SHELF_PRINCIPAL");
  return kMcOk;
}

// Mooncake's tenant_id on Shelf: PrincipalHasTenant, else INVALID_PARAMS.
int CheckTenant(const ClientOptions& o, const std::string& tenant_id) {
  return PrincipalHasTenant(o, tenant_id) ? kMcOk : kMcInvalidParams;
}

}  // namespace

int MooncakeStore::Setup(const std::string& local_hostname, const std::string& metadata_server,
                         int64_t global_segment_size, int64_t local_buffer_size,
                         const std::string& protocol, const std::string& rdma_devices,
                         const std::string& master_server_addr, const SetupExtras& extras) {
  ClientOptions base;
  if (int rc = ShelfEnvironmentOptions(&base); rc != kMcOk) return rc;
  return SetupWith(std::move(base), local_hostname, metadata_server, global_segment_size,
                   local_buffer_size, protocol, rdma_devices, master_server_addr, extras);
}

int MooncakeStore::SetupWith(ClientOptions o, const std::string& local_hostname,
                             const std::string& metadata_server, int64_t global_segment_size,
                             int64_t local_buffer_size, const std::string& protocol,
                             const std::string& rdma_devices, const std::string& master_server_addr,
                             const SetupExtras& extras) {
  if (global_segment_size < 0 || local_buffer_size < 0) return kMcInvalidParams;
  // Shelf's SSD tier is the stores' (--ssd-dir), and its metrics are the
  // master's and the stores' endpoints: ssd_offload_path and the client
  // HTTP server's port are accepted and unused.
  if (extras.client_http_port < 0 || extras.client_http_port > 65535) return kMcInvalidParams;
  if (int rc = CheckTenant(o, extras.tenant_id); rc != kMcOk) return rc;
  o.masters = MasterList(master_server_addr, metadata_server);
  if (o.masters.empty()) return kMcInvalidParams;
  if (protocol == "rdma") {
    // The first device of Mooncake's comma-separated list; none: tcp.
    o.rdma_device = rdma_devices.substr(0, rdma_devices.find(','));
  } else if (protocol != "tcp") {
    return kMcInvalidParams;
  }
  return Connect(o, local_hostname, local_buffer_size);
}

int MooncakeStore::SetupConfig(const std::map<std::string, std::string>& config) {
  auto text = [&](const char* key, const char* fallback) -> std::string {
    auto it = config.find(key);
    return it == config.end() ? fallback : it->second;
  };
  auto size = [&](const char* key, int64_t* out) {
    auto it = config.find(key);
    return it == config.end() || ParseSize(it->second, out);
  };
  auto flag = [&](const char* key) {
    const std::string v = text(key, "");
    return v == "True" || v == "true" || v == "1";
  };
  int64_t segment = kDefaultSegmentBytes, buffer = kDefaultSegmentBytes;
  if (!size("global_segment_size", &segment) || !size("local_buffer_size", &buffer)) {
    return kMcInvalidParams;
  }
  SetupExtras extras;
  extras.enable_ssd_offload = flag("enable_ssd_offload");
  extras.ssd_offload_path = text("ssd_offload_path", "");
  extras.tenant_id = text("tenant_id", "default");
  extras.enable_client_http_server = flag("enable_client_http_server");
  if (!size("client_http_port", &extras.client_http_port)) return kMcInvalidParams;
  // An empty master address with metadata_server naming etcd finds the
  // masters there (MasterList).
  std::string master = config.count("master_server_address") != 0
                           ? text("master_server_address", "")
                           : text("master_server_addr", "127.0.0.1:50051");
  std::string devices = text("device_name", "");
  if (devices.empty()) devices = text("rdma_devices", "");
  ClientOptions base;
  if (std::string secret_file = text("shelf_secret_file", ""); !secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(secret_file);
    if (!secret.ok()) return kMcInvalidParams;
    base.secret = *std::move(secret);
  }
  base.credentials_file = text("shelf_credentials", "");
  base.principal = text("shelf_principal", "");
  return SetupWith(std::move(base), text("local_hostname", ""),
                   text("metadata_server", "P2PHANDSHAKE"), segment, buffer,
                   text("protocol", "tcp"), devices, master, extras);
}

int MooncakeStore::SetupDummy(int64_t mem_pool_size, int64_t local_buffer_size,
                              const std::string& server_address) {
  if (mem_pool_size < 0 || local_buffer_size < 0) return kMcInvalidParams;
  ClientOptions o;
  if (int rc = ShelfEnvironmentOptions(&o); rc != kMcOk) return rc;
  o.masters = MasterList(server_address, "");
  if (o.masters.empty()) return kMcInvalidParams;
  return Connect(o, "", local_buffer_size);
}

int MooncakeStore::Connect(const ClientOptions& options, const std::string& hostname,
                           int64_t local_buffer_bytes) {
  std::unique_ptr<Client> c;
  if (!Client::Open(options, &c).ok()) return kMcInvalidParams;
  std::shared_ptr<Client> client(std::move(c));
  // Open connects lazily; Mooncake's setup fails when the master cannot be
  // reached, so probe it once.
  std::vector<bool> present;
  Status s;
  { s = client->Exists({"\x01shelf-mooncake-probe"}, &present); }
  if (!s.ok()) return ToMooncake(s);
  Close();
  MutexLock lock(&mu_);
  client_ = std::move(client);
  hostname_ = hostname;
  local_buffer_bytes_ = local_buffer_bytes;
  return kMcOk;
}

bool ParseSize(const std::string& text, int64_t* out) {
  size_t i = 0;
  while (i < text.size() && text[i] == ' ') ++i;
  size_t digits = i;
  uint64_t value = 0;
  for (; i < text.size() && text[i] >= '0' && text[i] <= '9'; ++i) {
    if (value > (UINT64_MAX - 9) / 10) return false;
    value = value * 10 + static_cast<uint64_t>(text[i] - '0');
  }
  if (i == digits) return false;
  while (i < text.size() && text[i] == ' ') ++i;
  std::string unit;
  for (; i < text.size(); ++i) {
    if (text[i] == ' ') continue;
    unit.push_back(static_cast<char>(std::toupper(static_cast<unsigned char>(text[i]))));
  }
  // Mooncake reads KB, MB, GB, TB as powers of 1024; KiB, MiB, ... too.
  static const std::pair<const char*, int> kUnits[] = {
      {"", 0},     {"B", 0},  {"K", 10},  {"KB", 10},  {"KIB", 10}, {"M", 20},  {"MB", 20},
      {"MIB", 20}, {"G", 30}, {"GB", 30}, {"GIB", 30}, {"T", 40},   {"TB", 40}, {"TIB", 40}};
  for (const auto& [name, shift] : kUnits) {
    if (unit != name) continue;
    if (shift > 0 && value > (uint64_t{INT64_MAX} >> shift)) return false;
    if (value > uint64_t{INT64_MAX}) return false;
    *out = static_cast<int64_t>(value << shift);
    return true;
  }
  return false;
}

// Block i is the concatenation of its pieces [ptrs[i][j], + sizes[i][j]).
// Shelf stores a block contiguously, so the pieces are gathered into this
// thread's scratch and the keys go out in batches.
std::vector<int> MooncakeStore::BatchPutFromMulti(
    const std::vector<std::string>& keys, const std::vector<std::vector<uint64_t>>& all_ptrs,
    const std::vector<std::vector<int64_t>>& all_sizes, const ReplicateConfig& config) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return {};  // Mooncake's answer before setup: no codes at all
  std::vector<int> out(keys.size(), kMcInvalidParams);
  if (all_ptrs.size() != keys.size() || all_sizes.size() != keys.size()) return out;
  PutOptions po;
  if (int rc = ToPutOptions(config, keys.size(), &po); rc != kMcOk) {
    std::fill(out.begin(), out.end(), rc);
    return out;
  }
  std::vector<size_t> where;
  std::vector<bool> device;  // per entry of `where`: its pieces are device memory
  for (size_t i = 0; i < keys.size(); ++i) {
    bool gpu = false;
    if (int rc = CheckPieces(keys[i], all_ptrs[i], all_sizes[i], &gpu); rc != kMcOk) {
      out[i] = rc;
      continue;
    }
    where.push_back(i);
    device.push_back(gpu);
  }
  // A host key of one piece is put straight from it; the pieces of any
  // other are gathered into scratch first (Shelf stores a block
  // contiguously), device pieces by CUDA copies.
  ForEachScratchRun(
      where.size(), [&](size_t i) -> const std::vector<int64_t>& { return all_sizes[where[i]]; },
      [&](size_t i) { return !device[i] && all_ptrs[where[i]].size() == 1; },
      [&](size_t begin, size_t end, const std::vector<size_t>& offsets, size_t scratch_bytes) {
        char* scratch = ThreadScratch(scratch_bytes);
        std::vector<PutItem> run;
        std::vector<size_t> run_keys;  // run[j] is key run_keys[j]
        for (size_t i = begin; i < end; ++i) {
          const size_t k = where[i];
          const size_t offset = offsets[i - begin];
          if (offset == SIZE_MAX) {
            run.push_back(PutItem{keys[k], reinterpret_cast<const char*>(all_ptrs[k][0]),
                                  static_cast<size_t>(all_sizes[k][0])});
            run_keys.push_back(k);
            continue;
          }
          size_t at = offset;
          Status copied;
          for (size_t p = 0; p < all_ptrs[k].size() && copied.ok(); ++p) {
            const size_t n = static_cast<size_t>(all_sizes[k][p]);
            const auto* piece = reinterpret_cast<const char*>(all_ptrs[k][p]);
            if (device[i]) {
              copied = FromAbsl(CopyDeviceMemory(Cuda(), scratch + at, piece, n,
                                                 CudaRuntime::CopyKind::kDeviceToHost));
            } else {
              std::memcpy(scratch + at, piece, n);
            }
            at += n;
          }
          if (!copied.ok()) {
            out[k] = ToMooncake(copied);
            continue;
          }
          run.push_back(PutItem{keys[k], scratch + offset, at - offset});
          run_keys.push_back(k);
        }
        if (run.empty()) return;
        std::vector<Status> st;
        Status s = c->BatchPut(run, &st, po);
        for (size_t j = 0; j < run.size(); ++j) out[run_keys[j]] = ToMooncake(s.ok() ? st[j] : s);
      });
  return out;
}

// Reads the blocks in batches: a host key of several pieces across them
// (Client::BatchGetIntoPieces), a host key of one piece straight into it,
// a device key whole into scratch and then over its pieces in order. A
// block larger than its pieces' total is INVALID_PARAMS, nothing copied.
std::vector<int> MooncakeStore::BatchGetIntoMulti(
    const std::vector<std::string>& keys, const std::vector<std::vector<uint64_t>>& all_ptrs,
    const std::vector<std::vector<int64_t>>& all_sizes) {
  std::vector<int> out(keys.size(), kMcInvalidParams);
  std::shared_ptr<Client> c = client();
  if (c == nullptr || all_ptrs.size() != keys.size() || all_sizes.size() != keys.size()) {
    return out;
  }
  std::vector<size_t> where;
  std::vector<bool> device;           // per entry of `where`: its pieces are device memory
  std::vector<PiecesItem> scattered;  // host keys of several pieces
  std::vector<size_t> scattered_keys;
  for (size_t i = 0; i < keys.size(); ++i) {
    bool gpu = false;
    if (int rc = CheckPieces(keys[i], all_ptrs[i], all_sizes[i], &gpu); rc != kMcOk) {
      out[i] = rc;
      continue;
    }
    if (!gpu && all_ptrs[i].size() > 1) {
      PiecesItem item;
      item.key = keys[i];
      for (size_t p = 0; p < all_ptrs[i].size(); ++p) {
        item.pieces.emplace_back(reinterpret_cast<void*>(all_ptrs[i][p]),
                                 static_cast<size_t>(all_sizes[i][p]));
      }
      scattered.push_back(std::move(item));
      scattered_keys.push_back(i);
      continue;
    }
    where.push_back(i);
    device.push_back(gpu);
  }
  // A host key of several pieces is read across them by libshelf (from a
  // store on this host, one copy out of its segment: BatchGetIntoPieces).
  ForEachBatchSlice(scattered.size(), [&](size_t b, size_t e) {
    std::vector<PiecesItem> slice(scattered.begin() + b, scattered.begin() + e);
    std::vector<Status> st;
    std::vector<size_t> got;
    Status s = c->BatchGetIntoPieces(slice, &st, &got);
    for (size_t i = b; i < e; ++i) {
      const Status& item = s.ok() ? st[i - b] : s;
      // Pieces smaller than the block: Mooncake's INVALID_PARAMS, nothing
      // written to them.
      out[scattered_keys[i]] = item.ok() ? static_cast<int>(std::min<size_t>(got[i - b], INT32_MAX))
                               : item.code() == StatusCode::kOutOfRange ? kMcInvalidParams
                                                                        : ToMooncake(item);
    }
  });
  // A host key of one piece is read straight into it; a device key is read
  // whole into scratch, then copied out to its pieces in order by CUDA
  // copies.
  ForEachScratchRun(
      where.size(), [&](size_t i) -> const std::vector<int64_t>& { return all_sizes[where[i]]; },
      [&](size_t i) { return !device[i] && all_ptrs[where[i]].size() == 1; },
      [&](size_t begin, size_t end, const std::vector<size_t>& offsets, size_t scratch_bytes) {
        char* scratch = ThreadScratch(scratch_bytes);
        std::vector<std::string> run;
        std::vector<void*> targets;
        std::vector<size_t> capacities;
        for (size_t i = begin; i < end; ++i) {
          const size_t k = where[i];
          const size_t offset = offsets[i - begin];
          run.push_back(keys[k]);
          targets.push_back(offset == SIZE_MAX ? reinterpret_cast<void*>(all_ptrs[k][0])
                                               : scratch + offset);
          capacities.push_back(TotalOf(all_sizes[k]));
        }
        std::vector<Status> st;
        std::vector<size_t> got;
        Status s = BatchGetIntoMemory(c.get(), run, targets, capacities, Deadline(), &st, &got);
        for (size_t i = begin; i < end; ++i) {
          const size_t k = where[i];
          const Status& item = s.ok() ? st[i - begin] : s;
          if (item.code() == StatusCode::kOutOfRange) {
            // Pieces smaller than the block: Mooncake's INVALID_PARAMS, and
            // nothing was written to them.
            out[k] = kMcInvalidParams;
            continue;
          }
          if (!item.ok()) {
            out[k] = ToMooncake(item);
            continue;
          }
          // The block fills the pieces in order; pieces larger than it in
          // total keep their tail.
          const size_t size = got[i - begin];
          Status copied;
          if (const size_t offset = offsets[i - begin]; offset != SIZE_MAX) {
            size_t at = 0;
            for (size_t p = 0; p < all_ptrs[k].size() && at < size && copied.ok(); ++p) {
              const size_t n = std::min(static_cast<size_t>(all_sizes[k][p]), size - at);
              auto* piece = reinterpret_cast<void*>(all_ptrs[k][p]);
              if (device[i]) {
                copied = FromAbsl(CopyDeviceMemory(Cuda(), piece, scratch + offset + at, n,
                                                   CudaRuntime::CopyKind::kHostToDevice));
              } else {
                std::memcpy(piece, scratch + offset + at, n);
              }
              at += n;
            }
          }
          out[k] = copied.ok() ? static_cast<int>(std::min<size_t>(size, INT32_MAX))
                               : ToMooncake(copied);
        }
      });
  return out;
}

std::vector<std::vector<std::vector<int64_t>>> MooncakeStore::GetIntoRanges(
    const std::vector<uint64_t>& buffers, const std::vector<std::vector<std::string>>& keys,
    const std::vector<std::vector<std::vector<int64_t>>>& dst_offsets,
    const std::vector<std::vector<std::vector<int64_t>>>& src_offsets,
    const std::vector<std::vector<std::vector<int64_t>>>& sizes) {
  using Ranges = std::vector<std::vector<std::vector<int64_t>>>;
  Ranges out(keys.size());
  std::shared_ptr<Client> c = client();
  bool shapes = buffers.size() == keys.size() && dst_offsets.size() == keys.size() &&
                src_offsets.size() == keys.size() && sizes.size() == keys.size();
  // Each key's ranges, checked against its target buffer; a key with a bad
  // range fails whole (every range answers the code).
  std::vector<std::string> wanted;
  std::vector<std::pair<size_t, size_t>> where;  // (buffer, key) of each wanted key
  for (size_t b = 0; b < keys.size(); ++b) {
    out[b].resize(keys[b].size());
    bool buffer_shape = shapes && dst_offsets[b].size() == keys[b].size() &&
                        src_offsets[b].size() == keys[b].size() &&
                        sizes[b].size() == keys[b].size();
    for (size_t k = 0; k < keys[b].size(); ++k) {
      size_t n = buffer_shape ? sizes[b][k].size() : 0;
      int rc = c == nullptr || !buffer_shape ? kMcInvalidParams : kMcOk;
      if (rc == kMcOk && (dst_offsets[b][k].size() != n || src_offsets[b][k].size() != n)) {
        rc = kMcInvalidParams;
      }
      for (size_t r = 0; rc == kMcOk && r < n; ++r) {
        BufferHandle h;
        size_t off = 0;
        if (dst_offsets[b][k][r] < 0 || src_offsets[b][k][r] < 0) {
          rc = kMcInvalidParams;
        } else {
          rc = Locate(keys[b][k], buffers[b] + static_cast<uint64_t>(dst_offsets[b][k][r]),
                      sizes[b][k][r], &h, &off, /*host_only=*/true);
        }
      }
      if (rc != kMcOk) {
        out[b][k].assign(std::max<size_t>(n, 1), rc);
        continue;
      }
      wanted.push_back(keys[b][k]);
      where.emplace_back(b, k);
    }
  }
  if (wanted.empty()) return out;
  // One BatchGet per slice of keys; then each block's ranges are copied out.
  ForEachBatchSlice(wanted.size(), [&](size_t begin, size_t end) {
    std::vector<std::string> slice(wanted.begin() + begin, wanted.begin() + end);
    std::vector<std::string> values;
    std::vector<Status> st;
    Status s = c->BatchGet(slice, &values, &st);
    for (size_t i = begin; i < end; ++i) {
      auto [b, k] = where[i];
      std::vector<int64_t>& result = out[b][k];
      size_t n = sizes[b][k].size();
      if (!s.ok() || !st[i - begin].ok()) {
        result.assign(std::max<size_t>(n, 1), ToMooncake(s.ok() ? st[i - begin] : s));
        continue;
      }
      const std::string& v = values[i - begin];
      result.resize(n);
      for (size_t r = 0; r < n; ++r) {
        uint64_t src = static_cast<uint64_t>(src_offsets[b][k][r]);
        uint64_t len = static_cast<uint64_t>(sizes[b][k][r]);
        if (src > v.size() || len > v.size() - src) {
          result[r] = kMcInvalidParams;  // past the block's end
          continue;
        }
        std::memcpy(
            reinterpret_cast<char*>(buffers[b] + static_cast<uint64_t>(dst_offsets[b][k][r])),
            v.data() + src, len);
        result[r] = static_cast<int64_t>(len);
      }
    }
  });
  return out;
}

int MooncakeStore::Close() {
  std::shared_ptr<Client> client;
  {
    MutexLock lock(&mu_);
    client = std::move(client_);
    client_.reset();
    regions_.clear();
  }
  if (client != nullptr) {
    client->Close();
    client.reset();
  }
  return kMcOk;
}

int MooncakeStore::HealthCheck() {
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return kMcInvalidParams;
  std::vector<bool> present;
  return ToMooncake(c->Exists({"\x01shelf-mooncake-probe"}, &present));
}

std::string MooncakeStore::Hostname() {
  MutexLock lock(&mu_);
  return hostname_;
}

int MooncakeStore::PutBatch(const std::vector<std::string>& keys,
                            const std::vector<std::pair<const char*, size_t>>& values,
                            const ReplicateConfig& config) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr || keys.size() != values.size()) return kMcInvalidParams;
  if (int rc = CheckLocalBuffer(); rc != kMcOk) return rc;
  PutOptions po;
  if (int rc = ToPutOptions(config, keys.size(), &po); rc != kMcOk) return rc;
  std::vector<PutItem> items;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (!ValidKeyLength(keys[i].size())) return kMcInvalidKey;
    items.push_back(PutItem{keys[i], values[i].first, values[i].second});
  }
  int rc = kMcOk;
  ForEachBatchSlice(items.size(), [&](size_t b, size_t e) {
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

int MooncakeStore::Get(const std::string& key, std::string* value) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return kMcInvalidParams;
  if (!ValidKeyLength(key.size())) return kMcInvalidKey;
  return ToMooncake(c->Get(key, value));
}

int MooncakeStore::IsExist(const std::string& key) {
  std::vector<int> r = BatchIsExist({key});
  return r[0];
}

std::vector<int> MooncakeStore::BatchIsExist(const std::vector<std::string>& keys) {
  std::vector<int> out(keys.size(), kMcInvalidParams);
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return out;
  std::vector<std::string> valid;
  std::vector<size_t> where;
  for (size_t i = 0; i < keys.size(); ++i) {
    if (ValidKeyLength(keys[i].size())) {
      valid.push_back(keys[i]);
      where.push_back(i);
    } else {
      out[i] = kMcInvalidKey;
    }
  }
  ForEachBatchSlice(valid.size(), [&](size_t b, size_t e) {
    std::vector<std::string> slice(valid.begin() + b, valid.begin() + e);
    std::vector<bool> present;
    Status s = c->Exists(slice, &present);
    for (size_t i = b; i < e; ++i) {
      out[where[i]] = s.ok() ? (present[i - b] ? 1 : 0) : ToMooncake(s);
    }
  });
  return out;
}

// Mooncake's force skips its lease checks; Shelf's remove makes none. A
// pin never keeps a key from Mooncake's remove (pins shape eviction
// only), so Shelf's is always forced.
int MooncakeStore::Remove(const std::string& key, bool force) {
  (void)force;
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return kMcInvalidParams;
  if (!ValidKeyLength(key.size())) return kMcInvalidKey;
  return ToMooncake(c->Remove(key, Deadline(), /*force=*/true));
}

std::vector<int> MooncakeStore::BatchRemove(const std::vector<std::string>& keys, bool force) {
  (void)force;
  std::vector<int> out(keys.size(), kMcInvalidKey);
  std::shared_ptr<Client> c = client();
  if (c == nullptr) {
    std::fill(out.begin(), out.end(), kMcInvalidParams);
    return out;
  }
  std::vector<std::string> valid;
  std::vector<size_t> where;
  SelectValidKeys(keys, &valid, &where);
  ForEachBatchSlice(valid.size(), [&](size_t b, size_t e) {
    std::vector<std::string> slice(valid.begin() + b, valid.begin() + e);
    std::vector<Status> st;
    Status s = c->BatchRemove(slice, &st, Deadline(), /*force=*/true);
    for (size_t i = b; i < e; ++i) out[where[i]] = ToMooncake(s.ok() ? st[i - b] : s);
  });
  return out;
}

int64_t MooncakeStore::RemoveMatching(const std::string& pattern, bool regex, bool force) {
  (void)force;
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return kMcInvalidParams;
  uint64_t removed = 0;
  Status s;
  {
    s = c->RemoveMatching(pattern, &removed, regex, /*force=*/true);  // as Remove
  }
  if (!s.ok()) return ToMooncake(s);
  return static_cast<int64_t>(removed);
}

int64_t MooncakeStore::GetSize(const std::string& key) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return kMcInvalidParams;
  if (!ValidKeyLength(key.size())) return kMcInvalidKey;
  char probe = 0;
  size_t size = 0;
  Status s;
  { s = c->GetInto(key, &probe, 1, &size); }
  if (s.ok() || s.code() == StatusCode::kOutOfRange) return static_cast<int64_t>(size);
  return ToMooncake(s);
}

int MooncakeStore::RegisterBuffer(uint64_t address, int64_t size) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr || address == 0 || size <= 0) return kMcInvalidParams;
  {
    MutexLock lock(&mu_);
    if (regions_.count(address) != 0) return kMcInvalidParams;
  }
  // Device memory (vLLM registers its GPU KV cache) is registered as a GPU
  // buffer: libshelf stages it through pinned host memory, and never
  // touches it from the host. Where libshelf cannot (its runtime reaches
  // no device) but the loaded driver can copy, the region is kept without
  // a handle: the multi-buffer calls move its pieces by the driver's
  // copies. Neither: -600.
  const bool gpu = IsDeviceMemory(address);
  BufferHandle h;
  Status s;
  { s = c->RegisterBuffer(reinterpret_cast<void*>(address), static_cast<size_t>(size), &h, gpu); }
  if (!s.ok() && gpu && CanCopyDeviceMemory(Cuda())) {
    h = BufferHandle();
  } else if (!s.ok()) {
    return gpu ? kMcInvalidParams : ToMooncake(s);
  }
  MutexLock lock(&mu_);
  regions_[address] = Region{static_cast<size_t>(size), h, gpu};
  return kMcOk;
}

int MooncakeStore::UnregisterBuffer(uint64_t address) {
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
  if (!h.valid()) return kMcOk;  // device memory the driver copies: no handle
  return ToMooncake(c->UnregisterBuffer(h));
}

int64_t MooncakeStore::GetInto(const std::string& key, uint64_t address, int64_t size) {
  std::vector<int64_t> r = BatchGetInto({key}, {address}, {size});
  return r[0];
}

std::vector<int64_t> MooncakeStore::BatchGetInto(const std::vector<std::string>& keys,
                                                 const std::vector<uint64_t>& addresses,
                                                 const std::vector<int64_t>& sizes) {
  std::vector<int64_t> out(keys.size(), kMcInvalidParams);
  std::shared_ptr<Client> c = client();
  if (c == nullptr || addresses.size() != keys.size() || sizes.size() != keys.size()) {
    return out;
  }
  std::vector<GetIntoItem> items;
  std::vector<size_t> where;
  LocateAll(keys, addresses, sizes, &items, &where, &out);
  ForEachBatchSlice(items.size(), [&](size_t b, size_t e) {
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

int MooncakeStore::PutFrom(const std::string& key, uint64_t address, int64_t size,
                           const ReplicateConfig& config) {
  std::vector<int> r = BatchPutFrom({key}, {address}, {size}, config);
  return r[0];
}

std::vector<int> MooncakeStore::BatchPutFrom(const std::vector<std::string>& keys,
                                             const std::vector<uint64_t>& addresses,
                                             const std::vector<int64_t>& sizes,
                                             const ReplicateConfig& config) {
  std::vector<int> out(keys.size(), kMcInvalidParams);
  std::shared_ptr<Client> c = client();
  if (c == nullptr || addresses.size() != keys.size() || sizes.size() != keys.size()) {
    return out;
  }
  PutOptions po;
  if (int rc = ToPutOptions(config, keys.size(), &po); rc != kMcOk) {
    std::fill(out.begin(), out.end(), rc);
    return out;
  }
  std::vector<PutFromItem> items;
  std::vector<size_t> where;
  LocateAll(keys, addresses, sizes, &items, &where, &out);
  ForEachBatchSlice(items.size(), [&](size_t b, size_t e) {
    std::vector<PutFromItem> slice(items.begin() + b, items.begin() + e);
    std::vector<Status> st;
    Status s = c->BatchPutFrom(slice, &st, po);
    for (size_t i = b; i < e; ++i) out[where[i]] = ToMooncake(s.ok() ? st[i - b] : s);
  });
  return out;
}

std::shared_ptr<Client> MooncakeStore::client() {
  MutexLock lock(&mu_);
  return client_;
}

int MooncakeStore::ToPutOptions(const ReplicateConfig& config, size_t keys, PutOptions* po) {
  // What Mooncake refuses (its client's put paths and its master's
  // PutStart and soft-pin checks).
  if (config.prefer_alloc_in_same_node) return kMcInvalidParams;
  if (config.replica_num < 0 || config.nof_replica_num < 0 || config.dfs_replica_num < 0) {
    return kMcInvalidParams;
  }
  if (config.replica_num == 0 && config.nof_replica_num == 0 && config.dfs_replica_num == 0) {
    return kMcInvalidParams;
  }
  if (config.dfs_replica_num > 1 || (config.dfs_replica_num > 0 && config.replica_num == 0)) {
    return kMcInvalidParams;
  }
  if (config.soft_pin_ttl_ms.has_value() &&
      config.soft_pin_action != static_cast<int>(SoftPinAction::kEnable)) {
    return kMcInvalidParams;
  }
  if (config.group_ids.has_value() && config.group_ids->size() != keys) return kMcInvalidParams;
  // What Mooncake accepts and Shelf has no tier for.
  if (config.nof_replica_num > 0 || config.dfs_replica_num > 0) return kMcNotSupported;
  if (config.replica_num > static_cast<int64_t>(kReplicasMax)) return kMcInvalidParams;
  po->replicas = static_cast<uint32_t>(config.replica_num);
  // ENABLE pins at the commit, for the TTL given or Mooncake's default (0:
  // no pin, as there); `with_soft_pin`, the field of releases before
  // soft_pin_action, is ENABLE with the default. PRESERVE and DISABLE
  // leave a new block unpinned, and the block of a put is always new to
  // Shelf (an upsert of a pinned key is refused).
  if (config.soft_pin_action == static_cast<int>(SoftPinAction::kEnable)) {
    int64_t ttl = config.soft_pin_ttl_ms.value_or(static_cast<int64_t>(kDefaultSoftPinTtlMs));
    if (ttl < 0) return kMcInvalidParams;
    po->soft_pin_ttl_ms = static_cast<uint64_t>(ttl);
  } else if (config.with_soft_pin) {
    po->soft_pin_ttl_ms = kDefaultSoftPinTtlMs;
  }
  std::string host = Hostname();
  po->prefer_local = !host.empty() && config.preferred_segment == host;
  return kMcOk;
}

int MooncakeStore::CheckLocalBuffer() {
  MutexLock lock(&mu_);
  return local_buffer_bytes_ > 0 ? kMcOk : kMcInvalidParams;
}

int MooncakeStore::PutBytes(const std::string& key, const char* data, size_t size,
                            const ReplicateConfig& config, bool replace) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return kMcInvalidParams;
  if (!ValidKeyLength(key.size())) return kMcInvalidKey;
  if (size == 0) return kMcInvalidParams;
  if (int rc = CheckLocalBuffer(); rc != kMcOk) return rc;
  PutOptions po;
  if (int rc = ToPutOptions(config, 1, &po); rc != kMcOk) return rc;
  po.replace = replace;
  return ToMooncake(c->Put(key, data, size, po));
}

void MooncakeStore::BatchGetValues(const std::vector<std::string>& keys,
                                   std::vector<std::string>* values,
                                   std::vector<Status>* statuses) {
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return;
  std::vector<std::string> valid;
  std::vector<size_t> where;
  SelectValidKeys(keys, &valid, &where);
  ForEachBatchSlice(valid.size(), [&](size_t b, size_t e) {
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

int MooncakeStore::Locate(const std::string& key, uint64_t address, int64_t size,
                          BufferHandle* handle, size_t* offset, bool host_only, bool* gpu) {
  if (!ValidKeyLength(key.size())) return kMcInvalidKey;
  if (size <= 0 || address == 0) return kMcInvalidParams;
  MutexLock lock(&mu_);
  auto it = regions_.upper_bound(address);
  if (it == regions_.begin()) return kMcInvalidParams;
  --it;
  uint64_t off = address - it->first;
  if (off > it->second.size || static_cast<uint64_t>(size) > it->second.size - off) {
    return kMcInvalidParams;
  }
  if (host_only && it->second.gpu) return kMcInvalidParams;
  if (gpu != nullptr) *gpu = it->second.gpu;
  *handle = it->second.handle;
  *offset = static_cast<size_t>(off);
  return kMcOk;
}

int MooncakeStore::CheckPieces(const std::string& key, const std::vector<uint64_t>& ptrs,
                               const std::vector<int64_t>& sizes, bool* device) {
  if (!ValidKeyLength(key.size())) return kMcInvalidKey;
  if (ptrs.empty() || ptrs.size() != sizes.size()) return kMcInvalidParams;
  for (size_t j = 0; j < ptrs.size(); ++j) {
    BufferHandle h;
    size_t off = 0;
    bool gpu = false;
    if (int rc = Locate(key, ptrs[j], sizes[j], &h, &off, /*host_only=*/false, &gpu); rc != kMcOk) {
      return rc;
    }
    // One kind of memory per key: its pieces move one way.
    if (j > 0 && gpu != *device) return kMcInvalidParams;
    *device = gpu;
  }
  return kMcOk;
}

std::map<std::string, std::vector<ReplicaDescriptor>> MooncakeStore::BatchGetReplicaDesc(
    const std::vector<std::string>& keys) {
  std::map<std::string, std::vector<ReplicaDescriptor>> out;
  std::shared_ptr<Client> c = client();
  if (c == nullptr) return out;
  for (const std::string& key : keys) {
    if (!ValidKeyLength(key.size()) || out.count(key) > 0) continue;
    // Locate of a one-key chain: each store holding the key, and its tier.
    std::vector<NodeRun> nodes;
    if (!c->Locate({key}, &nodes).ok()) continue;
    std::vector<ReplicaDescriptor> replicas;
    for (const NodeRun& n : nodes) {
      if (n.blocks == 0) continue;
      ReplicaDescriptor d;
      d.memory = !n.tiers.empty() && n.tiers[0] == Tier::kDram;
      d.node_id = n.node_id;
      d.transport_endpoint = n.data_address;
      replicas.push_back(std::move(d));
    }
    if (!replicas.empty()) out[key] = std::move(replicas);
  }
  return out;
}

uint64_t HostMemAllocator::Alloc(int64_t size) {
  if (size <= 0) {
    throw std::runtime_error("MooncakeHostMemAllocator.alloc: size must be 1 byte or more, not " +
                             std::to_string(size));
  }
  // Shared host memory: a same-host store copies puts from it directly.
  void* memory = nullptr;
  Status s = AllocateSharedHostMemory(static_cast<size_t>(size), &memory);
  if (!s.ok()) {
    throw std::runtime_error("MooncakeHostMemAllocator.alloc of " + std::to_string(size) +
                             " bytes: " + s.ToString());
  }
  return reinterpret_cast<uintptr_t>(memory);
}

int HostMemAllocator::Free(uint64_t address) {
  return FreeSharedHostMemory(reinterpret_cast<void*>(address)).ok() ? 0 : -1;
}

}  // namespace shelf::mooncake
