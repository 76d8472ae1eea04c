// NativeConnector: the connector shape LMCache's multiprocess mode loads as
// a `native_plugin` L2 adapter (docs/integrations.md), over libshelf. It
// knows nothing of Python; lmcache_binding.cc wraps it as
// shelf.lmcache.ShelfConnector, and the C API of shelf/lmcache.h for the
// wheel's ctypes layer.
//
//   NativeConnector c(std::move(client), {.workers = 4});
//   uint64_t id = c.NewFutureId();
//   c.Submit(id, NativeConnector::Op::kGet, keys, buffers, lengths);
//   poll(c.event_fd()) ... for (auto& done : c.Drain()) ...
//
// Submit never blocks: a batch goes on a bounded queue (a full queue, or a
// closed connector, completes it at once with ok = false) and one of
// `workers` threads runs it through the client's batch calls, one master
// round trip per slice of keys. Each finished batch is appended to the
// completion list and the eventfd is written; Drain reads the eventfd and
// takes the list. The buffers of a batch must stay valid until its
// completion has been drained.
#ifndef SHELF_CLIENT_NATIVE_CONNECTOR_H_
#define SHELF_CLIENT_NATIVE_CONNECTOR_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "common/mutex.h"
#include "shelf/client.h"

namespace shelf {

class NativeConnector;

// What a ShelfConnector is opened with: its bindings' arguments.
struct NativeConnectorConfig {
  std::string master;              // HOST:PORT[,HOST:PORT...] or etcd://HOST:PORT/CLUSTER
  std::string secret_file;         // the cluster secret's file, or empty
  std::string credentials;         // a credentials file, or empty
  std::string principal;           // which of its principals
  std::string tenant = "default";  // must be that principal's ("default": any)
  uint32_t workers = 4;            // 1..64
  uint32_t queue_max = 1024;       // 1..65536
  uint64_t timeout_ms = 5000;
  uint32_t transfer_threads = 8;
  bool allow_shm = true;
};

// Checks `config`, opens a client with it and starts a connector over it.
// INVALID_ARGUMENT for workers, queue_max or master out of form or a
// secret file that cannot be read; PERMISSION_DENIED for a tenant that is
// not the principal's; the client's own errors.
Status OpenNativeConnector(const NativeConnectorConfig& config,
                           std::unique_ptr<NativeConnector>* out);

class NativeConnector {
 public:
  enum class Op { kGet, kSet, kExists, kDelete };

  struct Options {
    // Batches that run at once, each on its own thread. 1..64.
    uint32_t workers = 4;
    // Batches that may wait for a worker; one more completes at once with
    // ok = false (RESOURCE_EXHAUSTED). 1..65536.
    uint32_t queue_max = 1024;
  };

  // What LMCache's bridge receives: (future_id, ok, error, result_bools).
  // `results` is one 0/1 byte per key for kGet (the key was read, whole,
  // into its buffer), kExists (present) and kDelete (removed); empty for
  // kSet, whose `ok` covers every key.
  struct Completion {
    uint64_t future_id = 0;
    bool ok = true;
    std::string error;
    std::vector<uint8_t> results;
  };

  // Takes the client; starts the workers. The options must be in range
  // (the binding checks them).
  NativeConnector(std::unique_ptr<Client> client, Options options);
  ~NativeConnector();  // Close()
  NativeConnector(const NativeConnector&) = delete;
  NativeConnector& operator=(const NativeConnector&) = delete;

  // Readable while completions wait to be drained.
  int event_fd() const { return event_fd_; }

  // A new future id (1, 2, ...), for one Submit: a caller files what it
  // keeps for the batch under its id before the batch can complete.
  uint64_t NewFutureId() { return next_future_id_.fetch_add(1, std::memory_order_relaxed); }

  // Queues batch `future_id`. kGet reads key i into [buffers[i],
  // buffers[i] + lengths[i]), the keys in parallel: buffers that overlap
  // must receive the same bytes (two blocks copied into one place at once
  // leave a mix, which fails the checksum check). kSet stores those bytes;
  // kExists and kDelete take no buffers.
  // REQUIRES: buffers and lengths hold one entry per key for kGet and kSet.
  void Submit(uint64_t future_id, Op op, std::vector<std::string> keys, std::vector<void*> buffers,
              std::vector<size_t> lengths) ABSL_LOCKS_EXCLUDED(mu_);

  // The completions so far, oldest first; clears the eventfd.
  std::vector<Completion> Drain() ABSL_LOCKS_EXCLUDED(mu_);

  // Refuses new batches, lets queued and running ones finish (their
  // completions stay to be drained), joins the workers and closes the
  // client. Idempotent.
  void Close() ABSL_LOCKS_EXCLUDED(mu_);

  // A kGet slice registers its targets with the client for the length of
  // the slice, one registration per run of touching or overlapping
  // buffers (an engine's arena of chunks: one). A slice needing more than
  // this many goes in parts of this many keys, so that together the
  // workers stay within the client's 4096 registrations.
  static size_t GetRegistrationBudget(uint32_t workers);

 private:
  struct Request {
    uint64_t future_id = 0;
    Op op = Op::kGet;
    std::vector<std::string> keys;
    std::vector<void*> buffers;
    std::vector<size_t> lengths;
  };

  // Targets [begin, end) of a request, by address, in runs of touching
  // or overlapping buffers: [begin, end) of memory and the keys in it.
  struct TargetRun {
    uintptr_t begin = 0;
    uintptr_t end = 0;
    std::vector<size_t> items;
  };
  class Failures;

  void Work() ABSL_LOCKS_EXCLUDED(mu_);
  Completion Run(const Request& r);
  void RunGet(const Request& r, Completion* c, Failures* failed);
  static std::vector<TargetRun> TargetRuns(const Request& r, size_t begin, size_t end);
  void GetRuns(const Request& r, const std::vector<TargetRun>& runs, Completion* c,
               Failures* failed);
  template <typename Call, typename Item>
  static void ForEachSlice(const std::vector<std::string>& keys, Failures* failed, Call call,
                           Item item);
  void RunSet(const Request& r, Failures* failed);
  void RunExists(const Request& r, Completion* c, Failures* failed);
  void RunDelete(const Request& r, Completion* c, Failures* failed);
  void Complete(Completion c) ABSL_LOCKS_EXCLUDED(mu_);
  void Signal();

  const std::unique_ptr<Client> client_;
  const Options options_;
  const int event_fd_;
  Mutex mu_;
  CondVar work_;
  std::atomic<uint64_t> next_future_id_{1};
  bool closed_ ABSL_GUARDED_BY(mu_) = false;
  std::deque<Request> queue_ ABSL_GUARDED_BY(mu_);
  std::vector<Completion> done_ ABSL_GUARDED_BY(mu_);
  std::vector<std::thread> workers_;  // set in the constructor, joined by Close
  Mutex close_mu_;                    // one Close at a time
};

}  // namespace shelf

#endif  // SHELF_CLIENT_NATIVE_CONNECTOR_H_
