// gpu_transfer_check: put and get GB/s from and into CUDA device memory
// through libshelf, next to plain cudaMemcpy measured in the same run, with
// every byte read back into device memory compared to what was put.
//
// It starts a real cluster on loopback (LocalCluster: one shelf-master
// without etcd, one shelf-store with a DRAM segment and no SSD tier, both
// taken from $SHELF_BIN_DIR or the folder of this binary), registers two
// cudaMalloc buffers with RegisterBuffer(gpu=true) and, for blocks of 1 MiB
// and 16 MiB in batches of 32, through shared memory (the store on this
// host, as an engine's own node), through the TCP data plane (both staged
// through pinned memory), and, when the machine has an RDMA NIC
// (FindRdmaDevice), through rdma: gets by GPUDirect into the GPU buffer,
// puts pulled by the store (without a NIC it says so and checks the CUDA
// paths only):
//   put  BatchPutFrom from device memory, fresh keys every round (a put of
//        a key already present writes nothing);
//   get  BatchGetInto into device memory cleared before every round, then
//        copied back to pinned host memory and compared byte for byte;
//   one  PutFrom and GetInto of a single block at other offsets, compared;
//   ordered  puts right behind a write still queued on the engine's stream,
//        with that stream (or an event) passed (GpuSync), and gets ordered
//        on it, read back on the stream and compared (CheckStreamOrdering).
// The baseline: cudaMemcpy of the same blocks, one call per block, between
// device memory and pinned host memory: D2H is the ceiling of a put (its
// bytes leave the GPU), H2D of a get.
//
//   SHELF_BIN_DIR=build/bin build/bin/gpu_transfer_check [--rounds 10]
//
// --host-memory runs the same rows on plain host memory (memcpy for the
// copies), with no GPU: it checks the harness, the cluster and a bundle
// (tests/gpu/bundle.sh) on any machine; its figures are not a GPU's.
//
// Prints a table, then one JSON object on its last line. Exit status: 0 when
// every operation succeeded and every byte matched; 1 on any failed
// operation or wrong byte; 77 when there is no CUDA device (CTest reports
// the test as skipped); 2 for bad flags. The defaults are sized to finish
// well inside five minutes (tests/gpu/README.md).
#include <cuda_runtime_api.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <iterator>
#include <memory>
#include <string>
#include <system_error>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/clock.h"
#include "common/flags.h"
#include "common/json.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "tests/gpu/gpu_device.h"

namespace shelf {
namespace {

constexpr size_t kBatchBlocks = 32;
constexpr size_t kBlockBytes[] = {1ull << 20, 16ull << 20};
constexpr size_t kBlockBytesMax = 16ull << 20;
constexpr size_t kBufferBytes = kBatchBlocks * kBlockBytesMax;  // each of the four buffers
constexpr size_t kErrorsPrintedMax = 10;
static_assert(kBatchBlocks <= kBatchItemsMax, "one batch call per round");
static_assert(kBlockBytes[0] % 8 == 0 && kBlockBytes[1] % 8 == 0, "patterns fill whole words");
static_assert(kBlockBytes[1] == kBlockBytesMax, "the buffers hold a batch of the largest blocks");

std::string SizeName(size_t bytes) { return absl::StrCat(bytes >> 20, "MiB"); }

// Every failure of the run: counted, the first few printed as they happen.
class Errors {
 public:
  void Add(const std::string& what) {
    if (count_ < kErrorsPrintedMax) std::fprintf(stderr, "gpu_transfer_check: %s\n", what.c_str());
    if (count_ == 0) first_ = what;
    ++count_;
  }
  // True when `e` is cudaSuccess; records it otherwise.
  bool Cuda(cudaError_t e, const std::string& what) {
    if (e == cudaSuccess) return true;
    Add(absl::StrCat(what, ": ", CudaErrorText(e)));
    return false;
  }
  // True when `s` is OK; records it otherwise.
  bool Shelf(const Status& s, const std::string& what) {
    if (s.ok()) return true;
    Add(absl::StrCat(what, ": ", s.ToString()));
    return false;
  }
  uint64_t count() const { return count_; }
  const std::string& first() const { return first_; }

 private:
  uint64_t count_ = 0;
  std::string first_;
};

// Word `word` of block `block` under `seed` (splitmix64): distinct for every
// seed, block and word, so a block in the wrong slot, a shifted copy or a
// block left from another row all show as wrong bytes.
uint64_t PatternWord(uint64_t seed, uint64_t block, uint64_t word) {
  uint64_t x = seed * 0xD1B54A32D192ED03ull + (block << 32) + word + 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

void FillBlocks(uint64_t seed, size_t block_bytes, size_t blocks, char* out) {
  for (size_t b = 0; b < blocks; ++b) {
    for (size_t w = 0; w < block_bytes / 8; ++w) {
      uint64_t v = PatternWord(seed, b, w);
      std::memcpy(out + b * block_bytes + w * 8, &v, 8);
    }
  }
}

// Compares `blocks` blocks; returns how many differ and records the first
// differing byte of each.
uint64_t CompareBlocks(const char* want, const char* got, size_t block_bytes, size_t blocks,
                       const std::string& what, Errors* errors) {
  uint64_t wrong = 0;
  for (size_t b = 0; b < blocks; ++b) {
    const char* w = want + b * block_bytes;
    const char* g = got + b * block_bytes;
    if (std::memcmp(w, g, block_bytes) == 0) continue;
    ++wrong;
    size_t at = 0;
    while (at < block_bytes && w[at] == g[at]) ++at;
    errors->Add(absl::StrFormat(
        "%s: block %d: wrong bytes from offset %d (want 0x%02x, got 0x%02x)", what, b, at,
        static_cast<unsigned char>(w[at]), static_cast<unsigned char>(g[at])));
  }
  return wrong;
}

double Median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

// One measured row: `rounds` timed batches of kBatchBlocks blocks.
struct Row {
  std::string path;  // "cudaMemcpy", "shelf shm", "shelf tcp"
  std::string name;  // in the JSON keys: "cudamemcpy", "shm", "tcp"
  std::string op;    // "d2h", "h2d", "put", "get"
  size_t block_bytes = 0;
  uint64_t rounds = 0;
  double seconds = 0;
  std::vector<double> batch_ms;

  void Add(uint64_t us) {
    ++rounds;
    seconds += us / 1e6;
    batch_ms.push_back(us / 1e3);
  }
  double gbps() const {
    return seconds > 0 ? static_cast<double>(rounds * kBatchBlocks * block_bytes) / seconds / 1e9
                       : 0;
  }
};

// The four buffers of a run and the copies between them. Device mode:
// src and dst are cudaMalloc memory, expected and readback pinned host
// memory, copies are cudaMemcpy. Host mode (--host-memory, no GPU needed):
// all four are plain host memory and copies are memcpy, which checks the
// harness, the cluster and the bundle on any machine; its figures are not a
// GPU's.
class Memory {
 public:
  explicit Memory(bool device) : device_(device) {}
  Memory(const Memory&) = delete;
  Memory& operator=(const Memory&) = delete;
  ~Memory() {
    for (char* p : {src_, dst_}) Free(p, device_ ? Kind::kDevice : Kind::kHost);
    for (char* p : {expected_, readback_}) Free(p, device_ ? Kind::kPinned : Kind::kHost);
  }

  // Allocates every buffer, kBufferBytes each.
  cudaError_t Allocate() {
    if (cudaError_t e = Alloc(&src_, device_ ? Kind::kDevice : Kind::kHost); e != cudaSuccess) {
      return e;
    }
    if (cudaError_t e = Alloc(&dst_, device_ ? Kind::kDevice : Kind::kHost); e != cudaSuccess) {
      return e;
    }
    if (cudaError_t e = Alloc(&expected_, device_ ? Kind::kPinned : Kind::kHost);
        e != cudaSuccess) {
      return e;
    }
    return Alloc(&readback_, device_ ? Kind::kPinned : Kind::kHost);
  }

  bool device() const { return device_; }
  char* src() const { return src_; }            // puts read from here
  char* dst() const { return dst_; }            // gets write here
  char* expected() const { return expected_; }  // what src holds
  char* readback() const { return readback_; }  // dst copied back

  // A copy between the two sides, finished when it returns.
  cudaError_t Copy(char* to, const char* from, size_t n, cudaMemcpyKind kind) const {
    if (!device_) {
      std::memcpy(to, from, n);
      return cudaSuccess;
    }
    return cudaMemcpy(to, from, n, kind);
  }
  // Fills [p, p + n) of src or dst with `value`, finished when it returns.
  cudaError_t Set(char* p, int value, size_t n) const {
    if (!device_) {
      std::memset(p, value, n);
      return cudaSuccess;
    }
    cudaError_t e = cudaMemset(p, value, n);
    return e == cudaSuccess ? cudaDeviceSynchronize() : e;
  }
  cudaError_t Sync() const { return device_ ? cudaDeviceSynchronize() : cudaSuccess; }

 private:
  enum class Kind { kDevice, kPinned, kHost };
  static cudaError_t Alloc(char** p, Kind kind) {
    void* v = nullptr;
    cudaError_t e = cudaSuccess;
    if (kind == Kind::kDevice) {
      e = cudaMalloc(&v, kBufferBytes);
    } else if (kind == Kind::kPinned) {
      e = cudaMallocHost(&v, kBufferBytes);
    } else {
      v = std::aligned_alloc(4096, kBufferBytes);
      if (v == nullptr) e = cudaErrorMemoryAllocation;
    }
    *p = static_cast<char*>(v);
    return e;
  }
  static void Free(char* p, Kind kind) {
    if (p == nullptr) return;
    if (kind == Kind::kDevice) {
      cudaFree(p);
    } else if (kind == Kind::kPinned) {
      cudaFreeHost(p);
    } else {
      std::free(p);
    }
  }

  const bool device_;
  char* src_ = nullptr;
  char* dst_ = nullptr;
  char* expected_ = nullptr;
  char* readback_ = nullptr;
};

// cudaMemcpy of a batch, one call per block, `rounds` timed after a
// warm-up. D2H copies src to readback, H2D expected to dst.
Row MeasureCopy(cudaMemcpyKind kind, size_t block_bytes, int64_t rounds, const Memory& m,
                Errors* errors) {
  Row row;
  row.path = m.device() ? "cudaMemcpy" : "memcpy";
  row.name = m.device() ? "cudamemcpy" : "memcpy";
  row.op = kind == cudaMemcpyDeviceToHost ? "d2h" : "h2d";
  row.block_bytes = block_bytes;
  for (int64_t r = 0; r <= rounds; ++r) {
    uint64_t t0 = MonoUs();
    for (size_t i = 0; i < kBatchBlocks; ++i) {
      size_t at = i * block_bytes;
      cudaError_t e = kind == cudaMemcpyDeviceToHost
                          ? m.Copy(m.readback() + at, m.src() + at, block_bytes, kind)
                          : m.Copy(m.dst() + at, m.expected() + at, block_bytes, kind);
      if (!errors->Cuda(e, absl::StrCat(row.path, " ", row.op))) return row;
    }
    if (!errors->Cuda(m.Sync(), "cudaDeviceSynchronize")) return row;
    uint64_t dt = MonoUs() - t0;
    if (r > 0) row.Add(dt);
  }
  return row;
}

std::vector<std::string> Keys(const std::string& prefix, size_t n) {
  std::vector<std::string> keys;
  for (size_t i = 0; i < n; ++i) keys.push_back(absl::StrCat(prefix, "/", i));
  return keys;
}

// Records a failed batch call or item; true when all went well.
bool CheckBatch(const Status& s, const std::vector<Status>& statuses, const std::string& what,
                Errors* errors) {
  if (!errors->Shelf(s, what)) return false;
  if (statuses.size() != kBatchBlocks) {
    errors->Add(
        absl::StrCat(what, ": ", statuses.size(), " statuses for ", kBatchBlocks, " items"));
    return false;
  }
  bool ok = true;
  for (size_t i = 0; i < statuses.size(); ++i) {
    ok = errors->Shelf(statuses[i], absl::StrCat(what, ": item ", i)) && ok;
  }
  return ok;
}

void RemoveKeys(Client* client, const std::vector<std::string>& keys, Errors* errors) {
  for (const std::string& k : keys) errors->Shelf(client->Remove(k), absl::StrCat("Remove ", k));
}

// One transport and block size: the put row, the get row, and the bytes
// checked.
struct ShelfResult {
  Row put, get;
  uint64_t blocks_verified = 0;
  uint64_t blocks_wrong = 0;
};

ShelfResult MeasureShelf(Client* client, const std::string& transport, BufferHandle src,
                         BufferHandle dst, size_t block_bytes, int64_t rounds,
                         const std::string& key_prefix, const Memory& m, Errors* errors) {
  ShelfResult res;
  res.put.path = res.get.path = absl::StrCat("shelf ", transport);
  res.put.name = res.get.name = transport;
  res.put.op = "put";
  res.get.op = "get";
  res.put.block_bytes = res.get.block_bytes = block_bytes;
  const size_t batch_bytes = kBatchBlocks * block_bytes;
  const std::string label = absl::StrCat(res.put.path, " ", SizeName(block_bytes));

  // Puts: fresh keys each round; all but the last round's are removed
  // (untimed) so the segment holds one batch.
  std::vector<std::string> keys;
  for (int64_t r = 0; r <= rounds; ++r) {
    if (!keys.empty()) RemoveKeys(client, keys, errors);
    keys = Keys(absl::StrCat(key_prefix, "/put", r), kBatchBlocks);
    std::vector<PutFromItem> items;
    for (size_t i = 0; i < kBatchBlocks; ++i) {
      items.push_back({keys[i], src, i * block_bytes, block_bytes});
    }
    std::vector<Status> statuses;
    uint64_t t0 = MonoUs();
    Status s = client->BatchPutFrom(items, &statuses);
    uint64_t dt = MonoUs() - t0;
    if (!CheckBatch(s, statuses, absl::StrCat(label, " BatchPutFrom round ", r), errors)) {
      // Free what was stored for the rows that follow; the keys that failed
      // are absent, so the answers say nothing new.
      for (const std::string& k : keys) client->Remove(k);
      return res;
    }
    if (r > 0) res.put.Add(dt);
  }

  // Gets of the last round's blocks into cleared device memory, every
  // round's bytes copied back and compared.
  std::vector<GetIntoItem> items;
  for (size_t i = 0; i < kBatchBlocks; ++i) {
    items.push_back({keys[i], dst, i * block_bytes, block_bytes});
  }
  for (int64_t r = 0; r <= rounds; ++r) {
    if (!errors->Cuda(m.Set(m.dst(), 0xA5 ^ static_cast<int>(r & 0xff), batch_bytes),
                      "cudaMemset")) {
      break;
    }
    std::vector<Status> statuses;
    std::vector<size_t> sizes;
    uint64_t t0 = MonoUs();
    Status s = client->BatchGetInto(items, &statuses, &sizes);
    uint64_t dt = MonoUs() - t0;
    const std::string what = absl::StrCat(label, " BatchGetInto round ", r);
    if (!CheckBatch(s, statuses, what, errors)) break;
    bool sizes_ok = sizes.size() == kBatchBlocks;
    for (size_t i = 0; sizes_ok && i < kBatchBlocks; ++i) sizes_ok = sizes[i] == block_bytes;
    if (!sizes_ok) {
      errors->Add(absl::StrCat(what, ": block sizes differ from ", block_bytes));
      break;
    }
    if (!errors->Cuda(m.Copy(m.readback(), m.dst(), batch_bytes, cudaMemcpyDeviceToHost),
                      "cudaMemcpy back")) {
      break;
    }
    res.blocks_verified += kBatchBlocks;
    res.blocks_wrong +=
        CompareBlocks(m.expected(), m.readback(), block_bytes, kBatchBlocks, what, errors);
    if (r > 0) res.get.Add(dt);
  }

  // The single-block calls, at other offsets: block 1 of src to slot 0 of
  // dst.
  const std::string one = absl::StrCat(key_prefix, "/one");
  size_t size = 0;
  if (errors->Cuda(m.Set(m.dst(), 0x5A, block_bytes), "cudaMemset") &&
      errors->Shelf(client->PutFrom(one, src, block_bytes, block_bytes),
                    absl::StrCat(label, " PutFrom")) &&
      errors->Shelf(client->GetInto(one, dst, 0, block_bytes, &size),
                    absl::StrCat(label, " GetInto")) &&
      errors->Cuda(m.Copy(m.readback(), m.dst(), block_bytes, cudaMemcpyDeviceToHost),
                   "cudaMemcpy back")) {
    if (size != block_bytes) {
      errors->Add(absl::StrCat(label, " GetInto: size ", size, ", want ", block_bytes));
    } else {
      res.blocks_verified += 1;
      res.blocks_wrong += CompareBlocks(m.expected() + block_bytes, m.readback(), block_bytes, 1,
                                        absl::StrCat(label, " GetInto"), errors);
    }
  }
  errors->Shelf(client->Remove(one), absl::StrCat("Remove ", one));
  RemoveKeys(client, keys, errors);
  return res;
}

// Blocks a stream for a while: the work enqueued behind it has certainly
// not run when the host's next call starts.
constexpr int kStreamStallMs = 200;
void CUDART_CB StallStream(void*) {
  std::this_thread::sleep_for(std::chrono::milliseconds(kStreamStallMs));
}

// Puts and gets ordered on the engine's stream (GpuSync), device memory
// only. The engine's write of the blocks is enqueued on its stream behind
// a stall, and the put follows at once with that stream passed: a put that
// did not wait for the stream would store the stale bytes under a valid
// checksum. The get goes into memory that earlier work on the stream is
// still clearing, and the engine copies the blocks back on its stream with
// no host wait in between; every byte is compared. Then the same with an
// event instead of the stream for a single PutFrom.
struct OrderedResult {
  uint64_t blocks_verified = 0;
  uint64_t blocks_wrong = 0;
};

OrderedResult CheckStreamOrdering(Client* client, BufferHandle src, BufferHandle dst, uint64_t seed,
                                  const std::string& key_prefix, const Memory& m, Errors* errors) {
  OrderedResult res;
  const size_t block_bytes = kBlockBytes[0];
  const size_t batch_bytes = kBatchBlocks * block_bytes;
  const std::string label = absl::StrCat(key_prefix, " stream-ordered");
  cudaStream_t stream = nullptr;
  cudaEvent_t event = nullptr;
  if (!errors->Cuda(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
                    "cudaStreamCreate") ||
      !errors->Cuda(cudaEventCreateWithFlags(&event, cudaEventDisableTiming), "cudaEventCreate")) {
    if (stream != nullptr) cudaStreamDestroy(stream);
    return res;
  }
  std::vector<std::string> keys = Keys(absl::StrCat(key_prefix, "/ordered"), kBatchBlocks);
  const std::string one = absl::StrCat(key_prefix, "/ordered-one");
  FillBlocks(seed, block_bytes, kBatchBlocks, m.expected());
  auto run = [&]() -> bool {
    // Batch put behind the engine's write, ordered by the stream.
    if (!errors->Cuda(m.Set(m.src(), 0x11, batch_bytes), "cudaMemset src") ||
        !errors->Cuda(cudaLaunchHostFunc(stream, StallStream, nullptr), "cudaLaunchHostFunc") ||
        !errors->Cuda(
            cudaMemcpyAsync(m.src(), m.expected(), batch_bytes, cudaMemcpyHostToDevice, stream),
            "cudaMemcpyAsync src on the engine's stream")) {
      return false;
    }
    std::vector<PutFromItem> puts;
    for (size_t i = 0; i < kBatchBlocks; ++i) {
      puts.push_back({keys[i], src, i * block_bytes, block_bytes});
    }
    PutOptions po;
    po.gpu.stream = stream;
    std::vector<Status> statuses;
    if (!CheckBatch(client->BatchPutFrom(puts, &statuses, po), statuses,
                    absl::StrCat(label, " BatchPutFrom"), errors)) {
      return false;
    }
    // Batch get into memory earlier work on the stream still clears,
    // read back on the stream; the event must be complete after it.
    if (!errors->Cuda(cudaLaunchHostFunc(stream, StallStream, nullptr), "cudaLaunchHostFunc") ||
        !errors->Cuda(cudaMemsetAsync(m.dst(), 0x22, batch_bytes, stream), "cudaMemsetAsync")) {
      return false;
    }
    std::vector<GetIntoItem> gets;
    for (size_t i = 0; i < kBatchBlocks; ++i) {
      gets.push_back({keys[i], dst, i * block_bytes, block_bytes});
    }
    std::vector<size_t> sizes;
    if (!CheckBatch(
            client->BatchGetInto(gets, &statuses, &sizes, Deadline(), GpuSync{stream, event}),
            statuses, absl::StrCat(label, " BatchGetInto"), errors) ||
        !errors->Cuda(
            cudaMemcpyAsync(m.readback(), m.dst(), batch_bytes, cudaMemcpyDeviceToHost, stream),
            "cudaMemcpyAsync back on the engine's stream") ||
        !errors->Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize") ||
        !errors->Cuda(cudaEventQuery(event), "cudaEventQuery after the stream")) {
      return false;
    }
    res.blocks_verified += kBatchBlocks;
    res.blocks_wrong += CompareBlocks(m.expected(), m.readback(), block_bytes, kBatchBlocks,
                                      absl::StrCat(label, " batch"), errors);
    // A single put ordered by an event the engine recorded after its
    // write, and a get with no ordering (in place when it returns).
    if (!errors->Cuda(m.Set(m.src(), 0x33, block_bytes), "cudaMemset src") ||
        !errors->Cuda(cudaLaunchHostFunc(stream, StallStream, nullptr), "cudaLaunchHostFunc") ||
        !errors->Cuda(cudaMemcpyAsync(m.src(), m.expected() + block_bytes, block_bytes,
                                      cudaMemcpyHostToDevice, stream),
                      "cudaMemcpyAsync src on the engine's stream") ||
        !errors->Cuda(cudaEventRecord(event, stream), "cudaEventRecord")) {
      return false;
    }
    PutOptions by_event;
    by_event.gpu.event = event;
    size_t size = 0;
    if (!errors->Shelf(client->PutFrom(one, src, 0, block_bytes, by_event),
                       absl::StrCat(label, " PutFrom")) ||
        !errors->Cuda(m.Set(m.dst(), 0x44, block_bytes), "cudaMemset dst") ||
        !errors->Shelf(client->GetInto(one, dst, 0, block_bytes, &size),
                       absl::StrCat(label, " GetInto")) ||
        !errors->Cuda(m.Copy(m.readback(), m.dst(), block_bytes, cudaMemcpyDeviceToHost),
                      "cudaMemcpy back")) {
      return false;
    }
    res.blocks_verified += 1;
    res.blocks_wrong += CompareBlocks(m.expected() + block_bytes, m.readback(), block_bytes, 1,
                                      absl::StrCat(label, " single"), errors);
    return true;
  };
  run();
  errors->Cuda(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  cudaEventDestroy(event);
  cudaStreamDestroy(stream);
  for (const std::string& k : keys) client->Remove(k);
  client->Remove(one);
  return res;
}

std::unique_ptr<Client> OpenClient(const std::string& master, bool allow_shm,
                                   int64_t transfer_threads, const std::string& rdma,
                                   Errors* errors) {
  ClientOptions o;
  o.rdma_device = rdma;
  o.rdma_store_pull_puts = !rdma.empty();
  o.masters = {master};
  o.timeout_ms = 60000;  // a batch of 512 MiB over loopback TCP, with room
  o.allow_shm = allow_shm;
  o.transfer_threads = static_cast<uint32_t>(transfer_threads);
  std::unique_ptr<Client> c;
  if (!errors->Shelf(Client::Open(o, &c), "Client::Open")) return nullptr;
  return c;
}

int Run(int argc, char** argv) {
  int64_t rounds = 10, copy_rounds = 50, device = 0, transfer_threads = 8;
  uint64_t dram_size = 4ull << 30;
  bool host_memory = false;
  std::string work_dir;
  Flags flags("gpu_transfer_check",
              "Put/get GB/s from and into CUDA device memory through libshelf, next to "
              "cudaMemcpy, with every byte read back compared. Exit 77 without a GPU.");
  flags.AddInt("rounds", &rounds, "timed batches per shelf row (after one warm-up)");
  flags.AddInt("copy-rounds", &copy_rounds, "timed batches per cudaMemcpy row");
  flags.AddInt("device", &device, "CUDA device ordinal");
  flags.AddInt("transfer-threads", &transfer_threads, "ClientOptions::transfer_threads");
  flags.AddSize("dram-size", &dram_size, "DRAM segment of the store");
  flags.AddString("work-dir", &work_dir, "keep the cluster's logs here");
  flags.AddBool("host-memory", &host_memory,
                "host memory instead of a GPU's (no GPU needed): checks the harness, the "
                "cluster and the bundle; the figures are not a GPU's");
  flags.ParseOrExit(argc, argv);
  if (rounds < 1 || rounds > 1000 || copy_rounds < 1 || copy_rounds > 10000 || device < 0 ||
      transfer_threads < 1 || transfer_threads > 256) {
    std::fprintf(stderr,
                 "gpu_transfer_check: --rounds (1..1000), --copy-rounds (1..10000), --device or "
                 "--transfer-threads (1..256) out of range\n");
    return 2;
  }
  // A row holds one batch of puts; the row before's get keys may wait for
  // their read leases to end before their ranges are freed; keep all of it
  // well under the master's eviction threshold.
  constexpr uint64_t kDramBytesMin = 4 * kBufferBytes + kBufferBytes / 2;
  if (dram_size < kDramBytesMin) {
    std::fprintf(stderr, "gpu_transfer_check: --dram-size must be at least %llu MiB\n",
                 static_cast<unsigned long long>(kDramBytesMin >> 20));
    return 2;
  }

  Errors errors;
  std::string device_text = "host memory (--host-memory: no GPU used, the figures are not a GPU's)";
  std::string device_name = "host";
  int driver = 0, runtime = 0;
  if (!host_memory) {
    if (int rc = CheckDevice(device); rc != 0) return rc;
    cudaDeviceProp prop;
    if (!errors.Cuda(cudaSetDevice(static_cast<int>(device)), "cudaSetDevice") ||
        !errors.Cuda(cudaGetDeviceProperties(&prop, static_cast<int>(device)),
                     "cudaGetDeviceProperties")) {
      return 1;
    }
    cudaDriverGetVersion(&driver);
    cudaRuntimeGetVersion(&runtime);
    char pci[32] = "?";
    cudaDeviceGetPCIBusId(pci, sizeof(pci), static_cast<int>(device));
    device_name = prop.name;
    device_text =
        absl::StrCat("GPU ", device, " ", prop.name, " (", pci, "), driver CUDA ",
                     CudaVersionText(driver), ", runtime CUDA ", CudaVersionText(runtime));
  }
  Memory m(/*device=*/!host_memory);
  if (!errors.Cuda(m.Allocate(), "allocating the buffers")) return 1;

  LocalCluster::Options co;
  co.stores = 1;
  co.dram_bytes = dram_size;
  co.ssd_bytes = 0;
  co.work_dir = work_dir;
  co.keep_work_dir = !work_dir.empty();
  const std::string nic = FindRdmaDevice();
  if (!nic.empty()) co.store_args = {"--rdma-device", nic};
  absl::StatusOr<std::unique_ptr<LocalCluster>> cluster = LocalCluster::Start(co);
  if (!cluster.ok()) {
    std::printf("gpu_transfer_check: FAILED: cannot start a cluster from %s: %s\n",
                DefaultBinDir().c_str(), std::string(cluster.status().message()).c_str());
    return 1;
  }

  const std::string copy_name = host_memory ? "memcpy" : "cudaMemcpy";
  std::printf("gpu_transfer_check: %s\n", device_text.c_str());
  std::printf(
      "cluster: shelf-master (no etcd) and one shelf-store on loopback, DRAM segment %llu MiB, "
      "no SSD tier; client transfer_threads %lld\n",
      static_cast<unsigned long long>(dram_size >> 20), static_cast<long long>(transfer_threads));
  std::printf(
      "batches of %zu blocks; shelf rows %lld timed rounds, %s rows %lld, each after one "
      "warm-up; GB = 1e9 bytes\n\n",
      kBatchBlocks, static_cast<long long>(rounds), copy_name.c_str(),
      static_cast<long long>(copy_rounds));
  if (nic.empty()) {
    std::printf(
        "no RDMA NIC (/sys/class/infiniband lists none): GPUDirect not checked; the CUDA "
        "paths (staging, stream order) are\n\n");
  } else {
    std::printf("RDMA NIC %s: GPUDirect gets and store-pulled puts checked\n\n", nic.c_str());
  }
  std::fflush(stdout);

  struct Transport {
    const char* name;
    bool allow_shm;
    std::string rdma;
  };
  std::vector<Transport> transports = {{"shm", true, ""}, {"tcp", false, ""}};
  if (!nic.empty()) transports.push_back({"rdma", false, nic});
  const std::string run_id = absl::StrCat("gpu-check/", UnixMs(), "/", MonoUs());
  std::vector<Row> copies;
  std::vector<ShelfResult> results;
  std::vector<OrderedResult> ordered;
  ClientStats totals;
  for (size_t t = 0; t < std::size(transports); ++t) {
    const Transport& tr = transports[t];
    std::unique_ptr<Client> client =
        OpenClient((*cluster)->master_address(), tr.allow_shm, transfer_threads, tr.rdma, &errors);
    if (client == nullptr) break;
    BufferHandle src, dst;
    if (!errors.Shelf(client->RegisterBuffer(m.src(), kBufferBytes, &src, m.device()),
                      "RegisterBuffer src") ||
        !errors.Shelf(client->RegisterBuffer(m.dst(), kBufferBytes, &dst, m.device()),
                      "RegisterBuffer dst")) {
      break;
    }
    for (size_t b : kBlockBytes) {
      // Each row its own content, so a block left from another row shows.
      const uint64_t seed = t * 1000 + b;
      FillBlocks(seed, b, kBatchBlocks, m.expected());
      if (!errors.Cuda(m.Copy(m.src(), m.expected(), kBatchBlocks * b, cudaMemcpyHostToDevice),
                       "loading src")) {
        break;
      }
      if (t == 0) {
        copies.push_back(MeasureCopy(cudaMemcpyDeviceToHost, b, copy_rounds, m, &errors));
        copies.push_back(MeasureCopy(cudaMemcpyHostToDevice, b, copy_rounds, m, &errors));
        // The GPU's own round trip must be exact before shelf's is judged.
        CompareBlocks(m.expected(), m.readback(), b, kBatchBlocks,
                      absl::StrCat(copy_name, " D2H ", SizeName(b)), &errors);
      }
      results.push_back(MeasureShelf(client.get(), tr.name, src, dst, b, rounds,
                                     absl::StrCat(run_id, "/", tr.name, "/", SizeName(b)), m,
                                     &errors));
    }
    if (m.device()) {
      ordered.push_back(CheckStreamOrdering(client.get(), src, dst, t * 1000 + 7,
                                            absl::StrCat(run_id, "/", tr.name), m, &errors));
    }
    errors.Shelf(client->UnregisterBuffer(src), "UnregisterBuffer src");
    errors.Shelf(client->UnregisterBuffer(dst), "UnregisterBuffer dst");
    ClientStats st = client->stats();
    // Every byte of a GPU buffer goes through the pinned bounce buffers; none
    // staged means the GPU path was not taken.
    if (m.device() && tr.rdma.empty() && st.bytes_staged_gpu == 0) {
      errors.Add(absl::StrCat(tr.name, ": no bytes staged through GPU bounce buffers"));
    }
    // Over rdma the gets land in the GPU buffer: none by GPUDirect means the
    // device did not register it (the reason is in the log).
    if (m.device() && !tr.rdma.empty() && st.bytes_loaded_gpu_direct == 0) {
      errors.Add(absl::StrCat("rdma: no bytes by GPUDirect (", st.gpu_rdma_registration_failures,
                              " GPU registrations refused)"));
    }
    totals.bytes_loaded_gpu_direct += st.bytes_loaded_gpu_direct;
    totals.bytes_loaded_rdma += st.bytes_loaded_rdma;
    if (tr.allow_shm && st.bytes_loaded_shm == 0) {
      std::printf("note: %s read nothing through shared memory (all over TCP)\n", tr.name);
    }
    totals.bytes_staged_gpu += st.bytes_staged_gpu;
    totals.bytes_loaded_shm += st.bytes_loaded_shm;
    totals.bytes_loaded_tcp += st.bytes_loaded_tcp;
    totals.checksum_mismatches += st.checksum_mismatches;
  }

  // The table: per block size, the two copy rows, then shelf's rows with
  // the ratio to the copy that bounds them.
  uint64_t blocks_verified = 0, blocks_wrong = 0;
  for (const ShelfResult& r : results) {
    blocks_verified += r.blocks_verified;
    blocks_wrong += r.blocks_wrong;
  }
  uint64_t ordered_verified = 0;
  for (const OrderedResult& r : ordered) {
    ordered_verified += r.blocks_verified;
    blocks_verified += r.blocks_verified;
    blocks_wrong += r.blocks_wrong;
  }
  auto copy_gbps = [&](size_t b, const std::string& op) {
    for (const Row& r : copies) {
      if (r.block_bytes == b && r.op == op) return r.gbps();
    }
    return 0.0;
  };
  auto ratio = [](double a, double b) { return b > 0 ? a / b : 0.0; };
  std::printf("%-7s %-11s %-24s %9s %9s  vs %s\n", "block", "path", "op", "GB/s", "p50_ms",
              copy_name.c_str());
  Json o = {{"check", "gpu_transfer"},
            {"memory", host_memory ? "host" : "device"},
            {"device", device_name},
            {"batch_blocks", static_cast<uint64_t>(kBatchBlocks)},
            {"rounds", rounds},
            {"copy_rounds", copy_rounds},
            {"transfer_threads", transfer_threads}};
  if (!host_memory) {
    o["driver_cuda"] = CudaVersionText(driver);
    o["runtime_cuda"] = CudaVersionText(runtime);
  }
  for (size_t b : kBlockBytes) {
    std::string size = SizeName(b);
    std::string key_size = absl::StrCat(b >> 20, "mib");
    for (const Row& r : copies) {
      if (r.block_bytes != b) continue;
      std::printf("%-7s %-11s %-24s %9.2f %9.3f\n", size.c_str(), r.path.c_str(),
                  r.op == "d2h" ? "D2H (src to host)" : "H2D (host to dst)", r.gbps(),
                  Median(r.batch_ms));
      o[absl::StrCat(r.name, "_", r.op, "_", key_size, "_gbps")] = r.gbps();
    }
    for (const ShelfResult& res : results) {
      for (const Row* r : {&res.put, &res.get}) {
        if (r->block_bytes != b) continue;
        bool put = r->op == "put";
        double vs = ratio(r->gbps(), copy_gbps(b, put ? "d2h" : "h2d"));
        std::printf("%-7s %-11s %-24s %9.2f %9.3f  %.2f of %s\n", size.c_str(), r->path.c_str(),
                    put ? "put (BatchPutFrom)" : "get (BatchGetInto)", r->gbps(),
                    Median(r->batch_ms), vs, put ? "D2H" : "H2D");
        std::string p = absl::StrCat(r->op, "_", r->name, "_", key_size, "_");
        o[p + "gbps"] = r->gbps();
        o[p + (put ? "vs_d2h" : "vs_h2d")] = vs;
      }
    }
  }
  const bool ok = errors.count() == 0 && blocks_wrong == 0 &&
                  results.size() == transports.size() * std::size(kBlockBytes);
  std::string first_error;
  if (errors.count() > 0) first_error = absl::StrCat(" (first: ", errors.first(), ")");
  std::printf(
      "\nverified: %llu blocks read back into %s memory and compared, %llu wrong; %llu errors%s\n",
      static_cast<unsigned long long>(blocks_verified), m.device() ? "device" : "host",
      static_cast<unsigned long long>(blocks_wrong),
      static_cast<unsigned long long>(errors.count()), first_error.c_str());
  std::printf("gpu_transfer_check: %s\n", ok ? "PASSED" : "FAILED");
  o.update(Json{{"blocks_verified", blocks_verified},
                {"ordered_blocks_verified", ordered_verified},
                {"blocks_wrong", blocks_wrong},
                {"bytes_staged_gpu", totals.bytes_staged_gpu},
                {"bytes_loaded_shm", totals.bytes_loaded_shm},
                {"bytes_loaded_tcp", totals.bytes_loaded_tcp},
                {"bytes_loaded_rdma", totals.bytes_loaded_rdma},
                {"bytes_loaded_gpu_direct", totals.bytes_loaded_gpu_direct},
                {"rdma_nic", nic},
                {"checksum_mismatches", totals.checksum_mismatches},
                {"errors", errors.count()},
                {"first_error", errors.first()},
                {"ok", ok}});
  std::printf("%s\n", JsonDump(o).c_str());
  return ok ? 0 : 1;
}

}  // namespace
}  // namespace shelf

int main(int argc, char** argv) { return shelf::Run(argc, argv); }
