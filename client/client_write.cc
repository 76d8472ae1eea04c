// ClientImpl: puts. PutStart (or BatchPutStart) places the replicas, the
// client writes each range over shared memory or TCP, and one PutCommit makes
// the written blocks visible; blocks that could not be written are aborted.
#include <cstring>
#include <thread>

#include "absl/container/flat_hash_map.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "client/client_impl.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/net.h"

namespace shelf {
namespace {

// Time an abort may take: it frees ranges early but is not needed for
// correctness (an uncommitted put expires on the master).
constexpr uint64_t kAbortTimeoutMs = 2000;
constexpr uint64_t kInFlightBackoffMaxMs = 100;

absl::Status FromRpcStatus(const v1::RpcStatus& s) {
  return absl::Status(static_cast<absl::StatusCode>(s.code()), s.message());
}

absl::Status CheckBlock(const void* data, size_t size) {
  if (size == 0 || data == nullptr) {
    return absl::InvalidArgumentError("a block needs data and a size > 0");
  }
  return absl::OkStatus();
}

}  // namespace

const char* const kBatchBlockInfoError =
    "PutOptions.block describes one block: give a batch's per item (PutItem.block, "
    "PutFromItem.block)";

absl::Status CheckBlockInfo(const BlockEventInfo& b) {
  if (b.parent_key.size() > kKeyBytesMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutOptions.block.parent_key exceeds ", kKeyBytesMax, " bytes"));
  }
  if (b.token_ids.size() > kBlockEventTokenIdsMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("PutOptions.block.token_ids: at most ", kBlockEventTokenIdsMax, " token ids"));
  }
  if (!b.model.empty() && !ValidEventModel(b.model)) {
    return absl::InvalidArgumentError(
        absl::StrCat("block.model must be 1..", kEventModelBytesMax,
                     " printable bytes without '@' or spaces (it names an event topic)"));
  }
  return absl::OkStatus();
}

v1::PutStartRequest ClientImpl::MakePutStart(const HostPut& item, const PutOptions& options) const {
  v1::PutStartRequest req;
  req.set_key(*item.key);
  req.set_size(item.size);
  req.set_checksum(BlockChecksum(item.data, item.size));
  v1::PutOptions* po = req.mutable_options();
  po->set_replicas(options.replicas);
  po->set_best_effort(options.best_effort);
  po->set_prefer_local(options.prefer_local);
  po->set_spread_label(options.spread_label);
  po->set_replace(options.replace);
  po->set_soft_pin_ttl_ms(options.soft_pin_ttl_ms);
  po->set_client_host_id(HostId());
  const BlockEventInfo& b = item.block != nullptr ? *item.block : options.block;
  if (!b.empty()) {
    req.set_parent_key(b.parent_key);
    v1::BlockEventInfo* info = req.mutable_block_info();
    info->set_has_engine_hash(b.has_engine_hash);
    info->set_engine_hash(b.engine_hash);
    info->set_has_engine_parent_hash(b.has_engine_parent_hash);
    info->set_engine_parent_hash(b.engine_parent_hash);
    info->set_block_tokens(b.block_tokens);
    info->mutable_token_ids()->Add(b.token_ids.begin(), b.token_ids.end());
    info->set_model(b.model);
  }
  return req;
}

absl::Status ClientImpl::WriteReplica(const v1::Replica& replica, const v1::WriteGrant& grant,
                                      const char* data, uint64_t size, uint64_t deadline_ms) {
  const char* transport = "tcp";
  absl::Status s = MoveReplica(transport::OpKind::kWrite, replica, &grant, const_cast<char*>(data),
                               size, deadline_ms, &transport);
  if (s.ok()) {
    stats_.bytes_stored.fetch_add(size);
    (std::strcmp(transport, "shm") == 0    ? stats_.bytes_stored_shm
     : std::strcmp(transport, "rdma") == 0 ? stats_.bytes_stored_rdma
                                           : stats_.bytes_stored_tcp)
        .fetch_add(size);
  }
  return s;
}

absl::Status ClientImpl::WriteReplicas(const v1::PutStartResponse& started, const char* data,
                                       uint64_t size, uint64_t deadline_ms) {
  if (started.replicas_size() != started.grants_size() || started.replicas_size() == 0) {
    return absl::InternalError("malformed PutStart response");
  }
  for (int i = 0; i < started.replicas_size(); ++i) {
    absl::Status s = WriteReplica(started.replicas(i), started.grants(i), data, size, deadline_ms);
    if (!s.ok()) return s;
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::Commit(const std::vector<uint64_t>& put_ids,
                                const std::vector<const std::string*>& keys, uint64_t deadline_ms,
                                std::vector<absl::Status>* statuses) {
  v1::PutCommitRequest commit;
  for (uint64_t id : put_ids) commit.add_put_ids(id);
  // With a location cache and shared memory, the commit answers where each
  // block now is, and this client reads its own puts on this host back
  // without a Lookup. The stamp is taken first: a change of a key
  // meanwhile keeps its entry out.
  const uint64_t stamp = cache_ != nullptr ? cache_->Stamp() : 0;
  if (cache_ != nullptr && options_.allow_shm) {
    commit.set_locations(true);
    commit.set_client_host_id(HostId());
  }
  v1::PutCommitResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::PutCommit, commit, &resp, deadline_ms);
  for (const std::string* key : keys) DropKeptLease(*key);  // a replace: read this one next
  if (s.ok() && resp.statuses_size() != static_cast<int>(put_ids.size())) {
    s = absl::InternalError("malformed commit response");
  }
  if (cache_ != nullptr) {
    // Whatever this client remembers of each key names the block the
    // commit replaced (or a lookup that raced with it): replaced by the
    // commit's location, or dropped, even when the call failed (it may
    // have committed). Kept only where the store's key board vouches for
    // reads: until the store records the commit (the master's notice
    // follows it within tens of milliseconds) a read of it falls back to a
    // Lookup at no extra cost, where a check over TCP would cost a round
    // trip first.
    const bool located = s.ok() && resp.locations_size() == resp.statuses_size() &&
                         resp.statuses_size() == static_cast<int>(keys.size());
    std::vector<const v1::ObjectLocation*> locs(keys.size(), nullptr);
    for (size_t i = 0; i < keys.size(); ++i) {
      const int k = static_cast<int>(i);
      const v1::ObjectLocation* loc =
          located && resp.statuses(k).code() == 0 ? &resp.locations(k) : nullptr;
      if (loc != nullptr &&
          (loc->replicas_size() == 0 || !SameHostDram(*loc) || AskedCached(*loc))) {
        loc = nullptr;
      }
      locs[i] = loc;
    }
    cache_->PutCommitted(keys, locs, stamp);
    metrics_.cache_entries.Set(static_cast<double>(cache_->size()));
  }
  if (!s.ok()) return s;
  statuses->clear();
  for (int i = 0; i < resp.statuses_size(); ++i) {
    absl::Status st = FromRpcStatus(resp.statuses(i));
    if (st.code() == absl::StatusCode::kNotFound) {
      // The put was reclaimed (timeout) or a target store died: retryable.
      st = absl::AbortedError(absl::StrCat("put was reclaimed before commit: ", st.message()));
    }
    statuses->push_back(st);
  }
  return absl::OkStatus();
}

void ClientImpl::Abort(const std::vector<uint64_t>& put_ids) {
  if (put_ids.empty()) return;
  v1::PutAbortRequest abort;
  for (uint64_t id : put_ids) abort.add_put_ids(id);
  v1::PutAbortResponse unused;
  CallMaster(&v1::MasterService::Stub::PutAbort, abort, &unused, MonoMs() + kAbortTimeoutMs)
      .IgnoreError();
}

absl::Status ClientImpl::PutOnce(const HostPut& item, const v1::PutStartRequest& req,
                                 uint64_t deadline_ms) {
  // A put of the same key by another writer is in flight: wait for it to
  // commit (or vanish, then write it ourselves).
  for (uint64_t backoff_ms = 2;; backoff_ms = std::min(backoff_ms * 2, kInFlightBackoffMaxMs)) {
    v1::PutStartResponse started;
    absl::Status s = CoalescedPutStart(req, &started, deadline_ms);
    if (!s.ok()) return s;
    switch (started.state()) {
      case v1::PUT_ALREADY_EXISTS:
        return absl::OkStatus();
      case v1::PUT_STARTED: {
        absl::Status written = WriteReplicas(started, item.data, item.size, deadline_ms);
        if (!written.ok()) {
          Abort({started.put_id()});
          return written;
        }
        absl::Status committed;
        s = CoalescedCommit(started.put_id(), *item.key, deadline_ms, &committed);
        // Unanswered (the call failed, perhaps unsent): ended either way, or
        // the put would hold its ranges and the key until it expires. An
        // abort of a put that did commit changes nothing (NOT_FOUND).
        if (!s.ok()) Abort({started.put_id()});
        return s.ok() ? committed : s;
      }
      case v1::PUT_IN_FLIGHT:
        break;
      default:
        return absl::InternalError("unknown PutStart state");
    }
    if (MonoMs() + backoff_ms >= deadline_ms) {
      return absl::DeadlineExceededError("another writer's put of this key is still open");
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(backoff_ms));
  }
}

absl::Status ClientImpl::CoalescedPutStart(const v1::PutStartRequest& req,
                                           v1::PutStartResponse* resp, uint64_t deadline_ms) {
  // Threads putting at once (an engine's workers, each with a block) start
  // their puts with one master call: its round trip and its CPU, on the
  // client and on the master, are paid once per call out, not once per
  // put. The leader's deadline is the earliest of every job it took.
  PutStartJob job{&req, deadline_ms};
  PutStartResult r = CallByDeadline(
      &put_starts_, job, kBatchItemsMax, [](const PutStartJob&) { return size_t{1}; },
      [this](const std::vector<const PutStartJob*>& jobs, size_t begin, size_t end,
             std::vector<PutStartResult>* results) {
        stats_.put_calls.fetch_add(1);
        stats_.put_calls_joined.fetch_add(end - begin - 1);
        const uint64_t deadline = jobs[0]->deadline_ms;
        if (end - begin == 1) {
          PutStartResult& out = (*results)[begin];
          out.status = CallMaster(&v1::MasterService::Stub::PutStart, *jobs[begin]->request,
                                  &out.response, deadline);
          return;
        }
        v1::BatchPutStartRequest batch;
        for (size_t j = begin; j < end; ++j) *batch.add_puts() = *jobs[j]->request;
        v1::BatchPutStartResponse all;
        absl::Status s = CallMaster(&v1::MasterService::Stub::BatchPutStart, batch, &all, deadline);
        const int n = static_cast<int>(end - begin);
        if (s.ok() && (all.results_size() != n || all.statuses_size() != n)) {
          // Whatever it started is reclaimed when its puts time out.
          s = absl::InternalError("malformed batch put response");
        }
        for (size_t j = begin; j < end; ++j) {
          PutStartResult& out = (*results)[j];
          if (!s.ok()) {
            // A status of its own for each caller (see CoalescedLookup).
            out.status = absl::Status(s.code(), s.message());
            continue;
          }
          const int k = static_cast<int>(j - begin);
          out.status = FromRpcStatus(all.statuses(k));
          out.response.Swap(all.mutable_results(k));
        }
      });
  *resp = std::move(r.response);
  return r.status;
}

absl::Status ClientImpl::CoalescedCommit(uint64_t put_id, const std::string& key,
                                         uint64_t deadline_ms, absl::Status* committed) {
  // As CoalescedPutStart: the commits of puts written at once go together.
  CommitJob job{put_id, &key, deadline_ms};
  CommitResult r = CallByDeadline(
      &commits_, job, kBatchItemsMax, [](const CommitJob&) { return size_t{1}; },
      [this](const std::vector<const CommitJob*>& jobs, size_t begin, size_t end,
             std::vector<CommitResult>* results) {
        stats_.put_calls.fetch_add(1);
        stats_.put_calls_joined.fetch_add(end - begin - 1);
        std::vector<uint64_t> ids;
        std::vector<const std::string*> keys;
        for (size_t j = begin; j < end; ++j) {
          ids.push_back(jobs[j]->put_id);
          keys.push_back(jobs[j]->key);
        }
        std::vector<absl::Status> statuses;
        const absl::Status s = Commit(ids, keys, jobs[0]->deadline_ms, &statuses);
        for (size_t j = begin; j < end; ++j) {
          CommitResult& out = (*results)[j];
          const absl::Status& st = s.ok() ? statuses[j - begin] : s;
          (s.ok() ? out.committed : out.call) = absl::Status(st.code(), st.message());
        }
      });
  *committed = std::move(r.committed);
  return r.call;
}

absl::Status ClientImpl::PutWithRetry(const HostPut& item, const v1::PutStartRequest& req,
                                      uint64_t deadline_ms) {
  absl::Status s = PutOnce(item, req, deadline_ms);
  // One retry: placement picks live stores again.
  if (s.code() == absl::StatusCode::kAborted) s = PutOnce(item, req, deadline_ms);
  return s;
}

absl::Status ClientImpl::CoalescedPut(const HostPut& item, const PutOptions& options,
                                      uint64_t deadline_ms) {
  // The checksum is taken here, in the caller's thread, before it queues.
  const v1::PutStartRequest req = MakePutStart(item, options);
  WholePutJob job{&item, &req, deadline_ms};
  WholePutResult r = CallByDeadline(
      &whole_puts_, job, kBatchItemsMax, [](const WholePutJob&) { return size_t{1}; },
      [this](const std::vector<const WholePutJob*>& jobs, size_t begin, size_t end,
             std::vector<WholePutResult>* results) {
        stats_.put_calls.fetch_add(1);
        stats_.put_calls_joined.fetch_add(end - begin - 1);
        std::vector<HostPut> items;
        std::vector<const v1::PutStartRequest*> requests;
        for (size_t j = begin; j < end; ++j) {
          items.push_back(*jobs[j]->item);
          requests.push_back(jobs[j]->request);
        }
        std::vector<absl::Status> statuses;
        std::vector<size_t> again;
        absl::Status s = PutStartedBlocks(items, requests, jobs[0]->deadline_ms, &statuses, &again);
        for (size_t j = begin; j < end; ++j) {
          // A status of its own for each caller (see CoalescedLookup).
          const absl::Status& st = s.ok() ? statuses[j - begin] : s;
          (*results)[j].status = absl::Status(st.code(), st.message());
        }
        for (size_t k : again) (*results)[begin + k].again = true;
      });
  // Waiting for another writer's put of the key, or putting it again after
  // the master reclaimed it, is this caller's alone: outside the queue.
  return r.again ? PutWithRetry(item, req, deadline_ms) : r.status;
}

absl::Status ClientImpl::PutHostBlocks(const std::vector<HostPut>& all_items,
                                       const PutOptions& options, uint64_t deadline_ms,
                                       std::vector<absl::Status>* all_statuses) {
  all_statuses->assign(all_items.size(), absl::OkStatus());
  if (all_items.empty()) return absl::OkStatus();
  if (all_items.size() == 1) {
    (*all_statuses)[0] = CoalescedPut(all_items[0], options, deadline_ms);
    return absl::OkStatus();
  }
  // A key twice in one batch is put once: the second would wait for the
  // first's commit, which comes only after the whole batch is written.
  // Its first value (content keys: the same bytes); with `replace`, its
  // last, as if the puts ran in order.
  std::vector<HostPut> items;
  std::vector<size_t> first_of(all_items.size());
  {
    absl::flat_hash_map<absl::string_view, size_t> seen;
    for (size_t i = 0; i < all_items.size(); ++i) {
      auto [it, inserted] = seen.emplace(*all_items[i].key, items.size());
      if (inserted) {
        items.push_back(all_items[i]);
      } else if (options.replace) {
        items[it->second] = all_items[i];
      }
      first_of[i] = it->second;
    }
  }
  std::vector<absl::Status> unique_statuses;
  absl::Status s = PutUniqueBlocks(items, options, deadline_ms, &unique_statuses);
  if (!s.ok()) return s;
  for (size_t i = 0; i < all_items.size(); ++i) (*all_statuses)[i] = unique_statuses[first_of[i]];
  return absl::OkStatus();
}

absl::Status ClientImpl::PutUniqueBlocks(const std::vector<HostPut>& items,
                                         const PutOptions& options, uint64_t deadline_ms,
                                         std::vector<absl::Status>* statuses) {
  std::vector<v1::PutStartRequest> built;
  built.reserve(items.size());
  std::vector<const v1::PutStartRequest*> requests;
  for (const HostPut& item : items) {
    built.push_back(MakePutStart(item, options));
    requests.push_back(&built.back());
  }
  return PutStartedBlocks(items, requests, deadline_ms, statuses, nullptr);
}

absl::Status ClientImpl::PutStartedBlocks(const std::vector<HostPut>& items,
                                          const std::vector<const v1::PutStartRequest*>& requests,
                                          uint64_t deadline_ms, std::vector<absl::Status>* statuses,
                                          std::vector<size_t>* again) {
  statuses->assign(items.size(), absl::OkStatus());
  v1::BatchPutStartRequest req;
  for (const v1::PutStartRequest* r : requests) *req.add_puts() = *r;
  v1::BatchPutStartResponse resp;
  absl::Status s = CallMaster(&v1::MasterService::Stub::BatchPutStart, req, &resp, deadline_ms);
  if (!s.ok()) return s;
  if (resp.results_size() != static_cast<int>(items.size()) ||
      resp.statuses_size() != static_cast<int>(items.size())) {
    std::vector<uint64_t> started;
    for (const v1::PutStartResponse& r : resp.results()) {
      if (r.state() == v1::PUT_STARTED) started.push_back(r.put_id());
    }
    Abort(started);
    return absl::InternalError("malformed batch put response");
  }
  // Write every started block in parallel. Blocks another writer is putting
  // wait for that writer (the single-block path), but only after this
  // batch's own puts are committed: another batch may be waiting for those
  // (two batches of the same keys, started interleaved, would otherwise
  // each wait for the other until their deadlines).
  enum class Next { kDone, kCommit, kAbort, kAfter };
  std::vector<Next> next(items.size(), Next::kDone);
  Parallel(items.size(), [&](size_t i) {
    absl::Status st = FromRpcStatus(resp.statuses(static_cast<int>(i)));
    const v1::PutStartResponse& started = resp.results(static_cast<int>(i));
    if (!st.ok()) {
      (*statuses)[i] = st;
      // A master in transition (a new leader recovering) refuses each
      // block of a batch; a single put's own PutStart waits it out
      // (CallMaster), so the caller that puts it again does.
      if (again != nullptr && st.code() == absl::StatusCode::kUnavailable) next[i] = Next::kAfter;
    } else if (started.state() == v1::PUT_STARTED) {
      st = WriteReplicas(started, items[i].data, items[i].size, deadline_ms);
      (*statuses)[i] = st;
      next[i] = st.ok() ? Next::kCommit : Next::kAbort;
    } else if (started.state() == v1::PUT_IN_FLIGHT) {
      next[i] = Next::kAfter;
    } else if (started.state() != v1::PUT_ALREADY_EXISTS) {
      (*statuses)[i] = absl::InternalError("unknown PutStart state");
    }
  });
  std::vector<uint64_t> commit_ids, abort_ids;
  std::vector<const std::string*> commit_keys;
  std::vector<size_t> committing, retry;
  for (size_t i = 0; i < items.size(); ++i) {
    uint64_t id = resp.results(static_cast<int>(i)).put_id();
    if (next[i] == Next::kCommit) {
      commit_ids.push_back(id);
      commit_keys.push_back(items[i].key);
      committing.push_back(i);
    } else if (next[i] == Next::kAbort) {
      abort_ids.push_back(id);
    } else if (next[i] == Next::kAfter) {
      retry.push_back(i);
    }
  }
  Abort(abort_ids);
  if (!commit_ids.empty()) {
    std::vector<absl::Status> committed;
    s = Commit(commit_ids, commit_keys, deadline_ms, &committed);
    if (!s.ok()) Abort(commit_ids);  // unanswered: ended either way (PutOnce)
    for (size_t j = 0; j < committing.size(); ++j) {
      size_t i = committing[j];
      (*statuses)[i] = s.ok() ? committed[j] : s;
      if ((*statuses)[i].code() == absl::StatusCode::kAborted) retry.push_back(i);
    }
  }
  if (again != nullptr) {
    *again = std::move(retry);
    return absl::OkStatus();
  }
  Parallel(retry.size(), [&](size_t j) {
    (*statuses)[retry[j]] = PutWithRetry(items[retry[j]], *requests[retry[j]], deadline_ms);
  });
  return absl::OkStatus();
}

Status ClientImpl::Put(const std::string& key, const void* data, size_t size,
                       const PutOptions& options) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(PutDeadline(options), &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  if (absl::Status s = CheckBlock(data, size); !s.ok()) return FromAbsl(s);
  if (absl::Status s = CheckBlockInfo(options.block); !s.ok()) return FromAbsl(s);
  HostPut item{&key, static_cast<const char*>(data), size};
  uint64_t start_us = MonoUs();
  Status s = FromAbsl(CoalescedPut(item, options, deadline_ms));
  RecordOp(Op::kPut, s, start_us);
  return s;
}

Status ClientImpl::BatchPut(const std::vector<PutItem>& items, std::vector<Status>* statuses,
                            const PutOptions& options) {
  if (statuses == nullptr) return Status(StatusCode::kInvalidArgument, "BatchPut: null statuses");
  statuses->clear();  // empty unless the batch as a whole succeeds
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(PutDeadline(options), &deadline_ms); !s.ok()) return FromAbsl(s);
  if (!options.block.empty()) return Status(StatusCode::kInvalidArgument, kBatchBlockInfoError);
  if (absl::Status s = ValidateBatchSize(items.size(), "blocks"); !s.ok()) return FromAbsl(s);
  statuses->assign(items.size(), Status());
  std::vector<HostPut> puts;
  std::vector<size_t> index;
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status v = ValidateKey(items[i].key);
    if (v.ok()) v = CheckBlock(items[i].data, items[i].size);
    if (v.ok()) v = CheckBlockInfo(items[i].block);
    if (!v.ok()) {
      (*statuses)[i] = FromAbsl(v);
      continue;
    }
    puts.push_back({&items[i].key, static_cast<const char*>(items[i].data), items[i].size,
                    items[i].block.empty() ? nullptr : &items[i].block});
    index.push_back(i);
  }
  std::vector<absl::Status> results;
  absl::Status s = PutHostBlocks(puts, options, deadline_ms, &results);
  if (!s.ok()) {
    statuses->clear();
    return FromAbsl(s);
  }
  for (size_t j = 0; j < index.size(); ++j) (*statuses)[index[j]] = FromAbsl(results[j]);
  return Status::Ok();
}

}  // namespace shelf
