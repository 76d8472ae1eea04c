// NativeConnector: the bodies of native_connector.h's declarations.
#include "client/native_connector.h"

#include <sys/eventfd.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "client/binding_options.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "shelf/limits.h"

namespace shelf {
namespace {

// The client's limit on registered buffers (Client::RegisterBuffer), of
// which the workers' get slices may use half.
constexpr size_t kRegistrationsForGets = 2048;

int NewEventFd() {
  int fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
  if (fd < 0) throw std::runtime_error("eventfd: " + ErrnoText(errno));
  return fd;
}

}  // namespace

// Folds the per-key failures of a batch into its completion: ok when none
// failed, else "N of M keys failed; first: <key>: <status>".
class NativeConnector::Failures {
 public:
  explicit Failures(size_t keys) : keys_(keys) {}

  void Add(const std::string& key, const Status& s) {
    if (count_++ == 0) first_ = key + ": " + s.ToString();
  }
  // The whole slice [begin, end) failed with `s`.
  void AddAll(const std::vector<std::string>& keys, size_t begin, size_t end, const Status& s) {
    for (size_t i = begin; i < end; ++i) Add(keys[i], s);
  }

  void Into(Completion* c) const {
    c->ok = count_ == 0;
    if (count_ > 0) {
      c->error = std::to_string(count_) + " of " + std::to_string(keys_) +
                 " keys failed; first: " + first_;
    }
  }

 private:
  const size_t keys_;
  size_t count_ = 0;
  std::string first_;
};

size_t NativeConnector::GetRegistrationBudget(uint32_t workers) {
  return std::clamp<size_t>(kRegistrationsForGets / std::max<uint32_t>(workers, 1), 1,
                            kBatchItemsMax);
}

NativeConnector::NativeConnector(std::unique_ptr<Client> client, Options options)
    : client_(std::move(client)), options_(options), event_fd_(NewEventFd()) {
  workers_.reserve(options_.workers);
  for (uint32_t i = 0; i < options_.workers; ++i) workers_.emplace_back([this] { Work(); });
}

NativeConnector::~NativeConnector() {
  Close();
  close(event_fd_);
}

void NativeConnector::Submit(uint64_t future_id, Op op, std::vector<std::string> keys,
                             std::vector<void*> buffers, std::vector<size_t> lengths) {
  Completion refused;
  {
    MutexLock lock(&mu_);
    if (!closed_ && queue_.size() < options_.queue_max) {
      queue_.push_back(
          Request{future_id, op, std::move(keys), std::move(buffers), std::move(lengths)});
      work_.Signal();
      return;
    }
    refused.error =
        closed_ ? Status(StatusCode::kFailedPrecondition, "the connector is closed").ToString()
                : Status(StatusCode::kResourceExhausted,
                         std::to_string(options_.queue_max) +
                             " batches already wait for a worker (queue_max)")
                      .ToString();
  }
  refused.future_id = future_id;
  refused.ok = false;
  if (op != Op::kSet) refused.results.assign(keys.size(), 0);
  Complete(std::move(refused));
}

std::vector<NativeConnector::Completion> NativeConnector::Drain() {
  // Read the eventfd before taking the list: a completion appended after
  // the take writes the eventfd again, so none is left without a wake.
  uint64_t count = 0;
  while (read(event_fd_, &count, sizeof count) < 0 && errno == EINTR) {
  }
  std::vector<Completion> out;
  MutexLock lock(&mu_);
  out.swap(done_);
  return out;
}

void NativeConnector::Close() {
  MutexLock one(&close_mu_);
  {
    MutexLock lock(&mu_);
    if (closed_ && workers_.empty()) return;
    closed_ = true;
    work_.SignalAll();
  }
  for (std::thread& t : workers_) t.join();
  workers_.clear();
  client_->Close();
}

void NativeConnector::Work() {
  for (;;) {
    Request r;
    {
      MutexLock lock(&mu_);
      while (queue_.empty() && !closed_) work_.Wait(&mu_);
      if (queue_.empty()) return;  // closed and drained
      r = std::move(queue_.front());
      queue_.pop_front();
    }
    Complete(Run(r));
  }
}

void NativeConnector::Complete(Completion c) {
  {
    MutexLock lock(&mu_);
    done_.push_back(std::move(c));
  }
  Signal();
}

void NativeConnector::Signal() {
  const uint64_t one = 1;
  while (write(event_fd_, &one, sizeof one) < 0 && errno == EINTR) {
  }
}

NativeConnector::Completion NativeConnector::Run(const Request& r) {
  Completion c;
  c.future_id = r.future_id;
  if (r.op != Op::kSet) c.results.assign(r.keys.size(), 0);
  Failures failed(r.keys.size());
  switch (r.op) {
    case Op::kGet:
      RunGet(r, &c, &failed);
      break;
    case Op::kSet:
      RunSet(r, &failed);
      break;
    case Op::kExists:
      RunExists(r, &c, &failed);
      break;
    case Op::kDelete:
      RunDelete(r, &c, &failed);
      break;
  }
  failed.Into(&c);
  return c;
}

void NativeConnector::RunGet(const Request& r, Completion* c, Failures* failed) {
  ForEachBatchSlice(r.keys.size(), [&](size_t begin, size_t end) {
    // Few registrations per slice (one per run of touching buffers); a
    // slice of scattered buffers goes in parts that stay within the budget.
    const size_t budget = GetRegistrationBudget(options_.workers);
    std::vector<TargetRun> runs = TargetRuns(r, begin, end);
    if (runs.size() <= budget) {
      GetRuns(r, runs, c, failed);
      return;
    }
    for (size_t part = begin; part < end; part += budget) {
      GetRuns(r, TargetRuns(r, part, std::min(end, part + budget)), c, failed);
    }
  });
}

std::vector<NativeConnector::TargetRun> NativeConnector::TargetRuns(const Request& r, size_t begin,
                                                                    size_t end) {
  std::vector<size_t> order(end - begin);
  for (size_t i = begin; i < end; ++i) order[i - begin] = i;
  auto address = [&](size_t i) { return reinterpret_cast<uintptr_t>(r.buffers[i]); };
  std::sort(order.begin(), order.end(),
            [&](size_t a, size_t b) { return address(a) < address(b); });
  std::vector<TargetRun> runs;
  for (size_t i : order) {
    const uintptr_t first = address(i), last = first + r.lengths[i];
    if (runs.empty() || first > runs.back().end) {
      runs.push_back(TargetRun{first, last, {}});
    } else {
      runs.back().end = std::max(runs.back().end, last);
    }
    runs.back().items.push_back(i);
  }
  return runs;
}

void NativeConnector::GetRuns(const Request& r, const std::vector<TargetRun>& runs, Completion* c,
                              Failures* failed) {
  std::vector<GetIntoItem> items;
  std::vector<size_t> index;  // items[j] is key index[j]
  std::vector<BufferHandle> handles;
  for (const TargetRun& run : runs) {
    BufferHandle h;
    Status s = client_->RegisterBuffer(reinterpret_cast<void*>(run.begin), run.end - run.begin, &h);
    for (size_t i : run.items) {
      if (!s.ok()) {
        failed->Add(r.keys[i], s);
        continue;
      }
      items.push_back(GetIntoItem{
          r.keys[i], h, reinterpret_cast<uintptr_t>(r.buffers[i]) - run.begin, r.lengths[i]});
      index.push_back(i);
    }
    if (s.ok()) handles.push_back(h);
  }
  std::vector<Status> statuses;
  std::vector<size_t> sizes;
  Status s = items.empty() ? Status::Ok() : client_->BatchGetInto(items, &statuses, &sizes);
  for (BufferHandle h : handles) client_->UnregisterBuffer(h);
  for (size_t j = 0; j < items.size(); ++j) {
    const size_t i = index[j];
    if (!s.ok()) {
      failed->Add(r.keys[i], s);
    } else if (!statuses[j].ok()) {
      failed->Add(r.keys[i], statuses[j]);
    } else if (sizes[j] != r.lengths[i]) {
      // LMCache's buffer is the chunk's exact size: a shorter block is
      // another object's bytes, not this chunk.
      failed->Add(r.keys[i], Status(StatusCode::kOutOfRange,
                                    "the block holds " + std::to_string(sizes[j]) +
                                        " bytes, the buffer " + std::to_string(r.lengths[i])));
    } else {
      c->results[i] = 1;
    }
  }
}

// Runs `call(begin, end)` on each batch slice of `keys`. A call that fails
// fails every key of its slice; otherwise `item(i, j)` sees key i, the
// slice's j-th.
template <typename Call, typename Item>
void NativeConnector::ForEachSlice(const std::vector<std::string>& keys, Failures* failed,
                                   Call call, Item item) {
  ForEachBatchSlice(keys.size(), [&](size_t begin, size_t end) {
    Status s = call(begin, end);
    if (!s.ok()) {
      failed->AddAll(keys, begin, end, s);
      return;
    }
    for (size_t i = begin; i < end; ++i) item(i, i - begin);
  });
}

void NativeConnector::RunSet(const Request& r, Failures* failed) {
  std::vector<Status> statuses;
  auto put = [&](size_t begin, size_t end) {
    std::vector<PutItem> items(end - begin);
    for (size_t i = begin; i < end; ++i) {
      items[i - begin].key = r.keys[i];
      items[i - begin].data = r.buffers[i];
      items[i - begin].size = r.lengths[i];
    }
    return client_->BatchPut(items, &statuses);
  };
  ForEachSlice(r.keys, failed, put, [&](size_t i, size_t j) {
    if (!statuses[j].ok()) failed->Add(r.keys[i], statuses[j]);
  });
}

void NativeConnector::RunExists(const Request& r, Completion* c, Failures* failed) {
  std::vector<bool> present;
  auto exists = [&](size_t begin, size_t end) {
    return client_->Exists({r.keys.begin() + begin, r.keys.begin() + end}, &present);
  };
  ForEachSlice(r.keys, failed, exists,
               [&](size_t i, size_t j) { c->results[i] = present[j] ? 1 : 0; });
}

void NativeConnector::RunDelete(const Request& r, Completion* c, Failures* failed) {
  std::vector<Status> statuses;
  auto remove = [&](size_t begin, size_t end) {
    return client_->BatchRemove({r.keys.begin() + begin, r.keys.begin() + end}, &statuses);
  };
  ForEachSlice(r.keys, failed, remove, [&](size_t i, size_t j) {
    if (statuses[j].ok()) {
      c->results[i] = 1;
    } else if (statuses[j].code() != StatusCode::kNotFound) {
      failed->Add(r.keys[i], statuses[j]);  // absent: not removed, and no error
    }
  });
}

Status OpenNativeConnector(const NativeConnectorConfig& config,
                           std::unique_ptr<NativeConnector>* out) {
  if (config.workers < 1 || config.workers > 64) {
    return Status(StatusCode::kInvalidArgument, "workers is 1..64");
  }
  if (config.queue_max < 1 || config.queue_max > 65536) {
    return Status(StatusCode::kInvalidArgument, "queue_max is 1..65536");
  }
  ClientOptions o;
  o.masters = SplitMasters(config.master);
  if (o.masters.empty()) {
    return Status(StatusCode::kInvalidArgument, "master is HOST:PORT[,HOST:PORT...] or etcd://...");
  }
  if (!config.secret_file.empty()) {
    absl::StatusOr<std::string> secret = ReadSecretFile(config.secret_file);
    if (!secret.ok()) {
      return Status(StatusCode::kInvalidArgument, std::string(secret.status().message()));
    }
    o.secret = *std::move(secret);
  }
  o.credentials_file = config.credentials;
  o.principal = config.principal;
  o.timeout_ms = config.timeout_ms;
  o.transfer_threads = config.transfer_threads;
  o.allow_shm = config.allow_shm;
  if (!PrincipalHasTenant(o, config.tenant)) {
    return Status(StatusCode::kPermissionDenied,
                  "tenant '" + config.tenant +
                      "' is not the tenant of the principal the credentials name (keys live in "
                      "the principal's tenant; \"default\" takes it as it is)");
  }
  std::unique_ptr<Client> client;
  if (Status s = Client::Open(o, &client); !s.ok()) return s;
  NativeConnector::Options options;
  options.workers = config.workers;
  options.queue_max = config.queue_max;
  try {
    *out = std::make_unique<NativeConnector>(std::move(client), options);
  } catch (const std::runtime_error& e) {
    return Status(StatusCode::kInternal, e.what());
  }
  return Status();
}

}  // namespace shelf
