// Master: queries over the key space: listing the index and removing keys
// by pattern (ListKeys, RemoveMatching; the pattern forms are described in
// shelf.proto), and where a chain of blocks lives (Locate).
#include <algorithm>
#include <memory>
#include <queue>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/string_view.h"
#include "absl/strings/strip.h"
#include "server/master/master.h"
#include "server/master/reads/key_matcher.h"

namespace shelf::master {

absl::Status Master::ListKeys(const v1::ListKeysRequest& req, v1::ListKeysResponse* resp,
                              const std::string& scope) {
  size_t count = req.count() == 0 ? kListKeysMax : req.count();
  if (count > kListKeysMax) {
    return absl::InvalidArgumentError(
        absl::StrCat("a listing page is 1..", kListKeysMax, " keys, asked ", req.count()));
  }
  if (req.cursor().size() > kKeyBytesMax) return absl::InvalidArgumentError("bad cursor");
  KeyMatcher matcher;
  if (absl::Status s = matcher.Init(req.pattern(), req.regex(), scope); !s.ok()) return s;
  const std::string& cursor = req.cursor();
  // The `count` smallest matching keys above the cursor: a max-heap.
  std::priority_queue<std::string> page;
  bool more = false;
  {
    ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
    for (Shard& shard : shards_) {
      MutexLock shard_lock(&shard.mu);
      for (const Object& obj : shard.objects) {
        absl::string_view k = obj.key.view();
        if (!cursor.empty() && k <= cursor) continue;
        if (page.size() == count && k >= page.top()) {
          more = more || matcher.Match(k);
          continue;
        }
        if (!matcher.Match(k)) continue;
        page.emplace(k);
        if (page.size() > count) {
          page.pop();
          more = true;
        }
      }
    }
  }
  std::vector<std::string> keys;
  keys.reserve(page.size());
  while (!page.empty()) {
    keys.push_back(page.top());
    page.pop();
  }
  for (auto it = keys.rbegin(); it != keys.rend(); ++it) resp->add_keys(*it);
  if (more) resp->set_next_cursor(keys.front());  // the largest key of the page
  return absl::OkStatus();
}

absl::Status Master::RemoveMatching(const v1::RemoveMatchingRequest& req,
                                    v1::RemoveMatchingResponse* resp, const std::string& scope) {
  auto matcher = std::make_shared<KeyMatcher>();
  if (absl::Status s = matcher->Init(req.pattern(), req.regex(), scope); !s.ok()) return s;
  // A pattern is matched under the shared lock, as a listing is: puts,
  // commits and heartbeats, which take the lock exclusively, wait only for
  // the removal of what matched. A flush (every key) needs no matching and
  // runs whole under the exclusive lock, so no key put meanwhile survives
  // its AllBlocksCleared.
  std::vector<std::string> matched;
  uint64_t pinned = 0;
  bool more = false;
  if (!matcher->MatchesAll()) {
    const uint64_t now = clock_->NowMs();
    ReaderMutexLock lock(&mu_);
    if (absl::Status s = CheckLeaderLocked(true); !s.ok()) return s;  // as Remove
    for (Shard& shard : shards_) {
      MutexLock shard_lock(&shard.mu);
      for (const Object& obj : shard.objects) {
        if (!matcher->Match(obj.key.view())) continue;
        if ((obj.hard_pin || obj.pin_until_ms() > now) && !req.force()) {
          ++pinned;
        } else if (matched.size() == kRemoveMatchingMax) {
          more = true;
        } else {
          matched.push_back(obj.key.str());
        }
      }
    }
  }
  const uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(true); !s.ok()) return s;
  // Collect first: erasing changes the shard maps being walked. With mu_
  // held exclusively the pointers stay valid until the erase.
  std::vector<Object*> victims;
  if (matcher->MatchesAll()) {
    for (Shard& shard : shards_) {
      MutexLock shard_lock(&shard.mu);
      for (const Object& found : shard.objects) {
        Object& obj = Mut(found);
        if ((obj.hard_pin || obj.pin_until_ms() > now) && !req.force()) {
          ++pinned;
        } else if (victims.size() == kRemoveMatchingMax) {
          more = true;
        } else {
          victims.push_back(&obj);
        }
      }
    }
  } else {
    // What matched, as it is now: a key removed meanwhile is gone, one
    // pinned meanwhile stays (the same key put again matches as before).
    for (const std::string& key : matched) {
      Object* obj = FindLocked(key);
      if (obj == nullptr) continue;
      if ((obj->hard_pin || obj->pin_until_ms() > now) && !req.force()) {
        ++pinned;
        continue;
      }
      victims.push_back(obj);
    }
  }
  // A flush (every key, none left behind) publishes its removals in bulk,
  // or as one AllBlocksCleared per node (--events-node-loss=cleared).
  const bool flush = req.pattern().empty() && scope.empty() && !more && pinned == 0;
  // Dead stores' blocks are not in the index: their inventories are
  // checked against the pattern when they register again.
  NotePatternRemovedLocked(matcher);
  if (flush) events_.BeginBulkRemoval();
  for (Object* obj : victims) {
    NoteRemovedLocked(obj->key.str());
    EraseObjectLocked(obj, now);
    metrics_.removes.Increment();
  }
  if (flush) {
    std::vector<std::string> ids;
    for (const auto& n : nodes_) ids.push_back(n->endpoint.node_id());
    events_.EndBulkRemoval(ids);
  }
  resp->set_removed(victims.size());
  resp->set_pinned(pinned);
  resp->set_more(more);
  return absl::OkStatus();
}

absl::Status Master::Locate(const v1::LocateRequest& req, v1::LocateResponse* resp) {
  if (absl::Status s = ValidateKeys(req.keys(), "Locate"); !s.ok()) return s;
  ReaderMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  Object* found[kBatchItemsMax];
  LookupCounts unused;
  FindBatchLocked(req.keys(), /*stop_at_miss=*/true, /*lease=*/false, /*touch=*/false, 0, found,
                  &unused);
  // A node's run goes on while it holds every block so far; it stops at
  // its first gap. The walk ends when no node's run is still going (or at
  // the chain's first block no node holds: FindBatchLocked stopped there).
  struct Run {
    uint32_t blocks = 0;
    uint32_t dram_blocks = 0;
    std::vector<v1::Tier> tiers;
  };
  absl::flat_hash_map<uint32_t, Run> runs;
  uint32_t cluster_blocks = 0;
  for (int i = 0; i < req.keys_size() && found[i] != nullptr; ++i) {
    const uint32_t block = static_cast<uint32_t>(i);
    ++cluster_blocks;
    bool any_going = false;
    for (const Replica& r : found[i]->replicas) {
      if (nodes_[r.node]->state == v1::NODE_DEAD) continue;
      const v1::Tier tier = r.tier == v1::TIER_DRAM ? v1::TIER_DRAM : v1::TIER_SSD;
      auto it = runs.find(r.node);
      if (it != runs.end() && it->second.blocks == block + 1) {
        // Another replica of this block on the same node: DRAM wins.
        if (tier == v1::TIER_DRAM) it->second.tiers.back() = v1::TIER_DRAM;
        continue;
      }
      // Block 0 starts a run; a later block extends only an unbroken one.
      if (block > 0 && (it == runs.end() || it->second.blocks != block)) continue;
      Run& run = it == runs.end() ? runs[r.node] : it->second;
      run.blocks = block + 1;
      run.tiers.push_back(tier);
      any_going = true;
    }
    if (!any_going) break;
  }
  for (auto& entry : runs) {
    Run& run = entry.second;
    while (run.dram_blocks < run.blocks && run.tiers[run.dram_blocks] == v1::TIER_DRAM) {
      ++run.dram_blocks;
    }
  }
  struct Ranked {
    const Run* run;
    const v1::StoreEndpoint* store;
  };
  std::vector<Ranked> order;
  order.reserve(runs.size());
  for (const auto& entry : runs) order.push_back({&entry.second, &nodes_[entry.first]->endpoint});
  std::sort(order.begin(), order.end(), [](const Ranked& a, const Ranked& b) {
    if (a.run->blocks != b.run->blocks) return a.run->blocks > b.run->blocks;
    if (a.run->dram_blocks != b.run->dram_blocks) return a.run->dram_blocks > b.run->dram_blocks;
    return a.store->node_id() < b.store->node_id();
  });
  for (const Ranked& r : order) {
    v1::NodeRun* out = resp->add_nodes();
    *out->mutable_store() = *r.store;
    out->set_blocks(r.run->blocks);
    out->set_dram_blocks(r.run->dram_blocks);
    for (v1::Tier t : r.run->tiers) out->add_tiers(t);
  }
  resp->set_cluster_blocks(cluster_blocks);
  return absl::OkStatus();
}

}  // namespace shelf::master
