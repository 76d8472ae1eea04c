// Removals a store has not heard of (docs/master.md, "Removed keys stay
// removed"). A store learns that a block went from the master's FORGET
// notices (DRAM) and DROP_SSD orders (SSD), which ride its heartbeats. A
// store that registers again before they reach it (a heartbeat that
// failed, a restart), or that was dead while the key was removed, still
// lists the block in its inventory; indexed again, a removed key would
// come back with its old bytes, which its checksum cannot catch. So those
// entries are not indexed, and the store is told again to drop them. The
// same goes for a key put again while the store was dead whose new commit
// has left the index since (evicted, or lost with its stores): the dead
// store's copy is of the old commit.
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "server/master/master.h"
#include "server/master/reads/key_matcher.h"

namespace shelf::master {

Unheard Master::UnheardRemovalsLocked(Node* n) {
  Unheard u;
  // In order: a RECORD of the same range after a FORGET (the key put there
  // again) is the block the range holds now.
  for (const v1::TierMove& m : n->notices) {
    if (m.kind() == v1::TierMove::FORGET) {
      u.forgets.insert({m.key(), m.segment_id(), m.offset()});
    } else if (m.kind() == v1::TierMove::RECORD) {
      u.forgets.erase({m.key(), m.segment_id(), m.offset()});
    }
  }
  // Drops not reported run: queued, sent, or taken and not run yet
  // (every DROP_SSD ordered is there until then; a store that does not
  // acknowledge reports none, and its drops leave when sent).
  for (const auto& [move_id, key] : n->drops_unreported) u.drops.insert(key);
  u.drops_unreported = std::exchange(n->drops_unreported, {});
  u.removed = std::exchange(n->removed_while_dead, {});
  u.patterns = std::exchange(n->patterns_removed_while_dead, {});
  u.committed = std::move(n->committed_while_dead);
  u.all = std::exchange(n->unheard_lost, false);
  return u;
}

bool Master::UnheardCoversLocked(const Unheard& u, const v1::InventoryEntry& e) {
  if (u.all || u.removed.contains(e.key())) return true;
  if (e.tier() == v1::TIER_SSD ? u.drops.contains(e.key())
                               : u.forgets.count({e.key(), e.segment_id(), e.offset()}) != 0) {
    return true;
  }
  // A pattern, or a commit while the node was dead, covers the keys the
  // index does not hold: a key put again since is the index's, and the
  // entry is judged against that commit as any other (AddInventoryLocked).
  // A key the index lacks that was committed since the node died had that
  // commit leave the index (evicted, or lost with its stores): the entry
  // is of an older commit, which must not come back in its place.
  if ((u.patterns.empty() && u.committed == nullptr) || FindLocked(e.key()) != nullptr) {
    return false;
  }
  if (u.committed != nullptr && u.committed->MayContain(e.key())) return true;
  for (const auto& pattern : u.patterns) {
    if (pattern->Match(e.key())) return true;
  }
  return false;
}

void Master::TellAgainLocked(Node* n, const v1::InventoryEntry& e) {
  if (e.tier() == v1::TIER_SSD) {
    OrderDropSsdLocked(n, e.key());
    return;
  }
  v1::TierMove m;
  m.set_kind(v1::TierMove::FORGET);
  m.set_key(e.key());
  m.set_segment_id(e.segment_id());
  m.set_offset(e.offset());
  m.set_size(e.size());
  m.set_checksum(e.checksum());
  m.set_term(leadership_.term());
  QueueNoticeLocked(n, std::move(m));
}

void Master::RememberUnheardLocked(uint32_t node) {
  Node& n = *nodes_[node];
  Unheard unheard = UnheardRemovalsLocked(&n);
  auto remember = [&](const std::string& key) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) {
    // Not a key this node holds a copy of now (put there again since).
    if (const Object* obj = FindLocked(key); obj != nullptr) {
      for (const Replica& r : obj->replicas) {
        if (r.node == node) return;
      }
    }
    if (n.unheard_lost) return;
    if (n.removed_while_dead.size() >= kRemovedWhileDeadMax) {
      LoseUnheardLocked(&n, "too many keys removed while it was dead");
      return;
    }
    n.removed_while_dead.insert(key);
  };
  for (const auto& f : unheard.forgets) remember(std::get<0>(f));
  for (const std::string& key : unheard.drops) remember(key);
}

void Master::NoteRemovedLocked(const std::string& key) {
  // Dead stores hear of nothing: their inventories are checked against
  // this when they register again. Bounded; past the bound the store comes
  // back empty (Node::unheard_lost).
  for (const auto& node : nodes_) {
    Node& n = *node;
    if (n.state != v1::NODE_DEAD || n.unheard_lost) continue;
    if (n.removed_while_dead.size() >= kRemovedWhileDeadMax) {
      LoseUnheardLocked(&n, "too many keys removed while it was dead");
      continue;
    }
    n.removed_while_dead.insert(key);
  }
}

void Master::NoteCommittedLocked(const std::string& key) {
  bool hashed = false;
  KeyFilter::Hash hash;
  for (const auto& node : nodes_) {
    Node& n = *node;
    if (n.state != v1::NODE_DEAD || n.unheard_lost) continue;
    if (n.committed_while_dead == nullptr) {
      n.committed_while_dead = std::make_unique<KeyFilter>(KeyFilter::kDefaultBits);
    } else if (n.committed_while_dead->added() >= options_.dead_store_commits_max) {
      // Past this the filter refuses much of what the node brings back
      // anyway (26% false positives at the default); say so, free it.
      LoseUnheardLocked(&n, "too many keys committed while it was dead");
      continue;
    }
    if (!std::exchange(hashed, true)) hash = KeyFilter::HashOf(key);
    n.committed_while_dead->Add(hash);
  }
}

void Master::NotePatternRemovedLocked(const std::shared_ptr<const KeyMatcher>& pattern) {
  for (const auto& node : nodes_) {
    Node& n = *node;
    if (n.state != v1::NODE_DEAD || n.unheard_lost) continue;
    std::vector<std::shared_ptr<const KeyMatcher>>& patterns = n.patterns_removed_while_dead;
    if (pattern->MatchesAll()) {  // a flush: nothing else to remember
      patterns.assign(1, pattern);
      continue;
    }
    // A large remove is several calls of one pattern (each removes a
    // bounded number of keys): remembered once.
    bool known = false;
    for (const auto& p : patterns) known |= p->MatchesAll() || p->SameAs(*pattern);
    if (known) continue;
    if (patterns.size() >= kPatternsRemovedWhileDeadMax) {
      LoseUnheardLocked(&n, "too many patterns removed while it was dead");
      continue;
    }
    patterns.push_back(pattern);
  }
}

void Master::LoseUnheardLocked(Node* n, absl::string_view why) {
  if (n->unheard_lost) return;
  n->unheard_lost = true;
  n->removed_while_dead = {};
  n->patterns_removed_while_dead = {};
  n->committed_while_dead = nullptr;
  n->orphans = {};
  SHELF_LOG(WARNING) << "a dead store's record of removals is lost: if it registers again, "
                        "what it holds is dropped, not indexed"
                     << Kv("node", n->endpoint.node_id()) << Kv("why", why);
}

}  // namespace shelf::master
