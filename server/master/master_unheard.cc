// Removals a store has not heard of (docs/master.md, "Removed keys stay
// removed"). A store learns that a block went from the master's FORGET
// notices (DRAM) and DROP_SSD orders (SSD), which ride its heartbeats. A
// store that registers again before they reach it (a heartbeat that
// failed, a restart), or that was dead while the key was removed, still
// lists the block in its inventory; indexed again, a removed key would
// come back with its old bytes, which its checksum cannot catch. So those
// entries are not indexed, and the store is told again to drop them.
#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "server/master/key_matcher.h"
#include "server/master/master.h"

namespace shelf {

Master::Unheard Master::UnheardRemovalsLocked(Node* n) {
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
  for (const v1::TierMove& m : n->outbox) {
    if (m.kind() == v1::TierMove::DROP_SSD) u.drops.insert(m.key());
  }
  u.removed = std::exchange(n->removed_while_dead, {});
  u.patterns = std::exchange(n->patterns_removed_while_dead, {});
  n->removed_while_dead_overflow = false;
  return u;
}

bool Master::UnheardCoversLocked(const Unheard& u, const v1::InventoryEntry& e) {
  if (u.removed.contains(e.key())) return true;
  if (e.tier() == v1::TIER_SSD ? u.drops.contains(e.key())
                               : u.forgets.count({e.key(), e.segment_id(), e.offset()}) != 0) {
    return true;
  }
  // A pattern covers the keys it matches that the index does not hold: a
  // key put again since is the index's, and the entry is judged against
  // that commit as any other (AddInventoryLocked).
  if (u.patterns.empty() || FindLocked(e.key()) != nullptr) return false;
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
  m.set_term(term_);
  n->notices.push_back(std::move(m));
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
    if (n.removed_while_dead.size() < kRemovedWhileDeadMax) n.removed_while_dead.insert(key);
  };
  for (const auto& f : unheard.forgets) remember(std::get<0>(f));
  for (const std::string& key : unheard.drops) remember(key);
}

void Master::NoteRemovedLocked(const std::string& key) {
  // Dead stores hear of nothing: their inventories are checked against
  // this when they register again. Bounded; past the bound a key removed
  // while a store was dead can come back when it returns (logged).
  for (const auto& node : nodes_) {
    Node& n = *node;
    if (n.state != v1::NODE_DEAD) continue;
    if (n.removed_while_dead.size() >= kRemovedWhileDeadMax) {
      WarnRemovedOverflow(&n);
      continue;
    }
    n.removed_while_dead.insert(key);
  }
}

void Master::NotePatternRemovedLocked(const std::shared_ptr<const KeyMatcher>& pattern) {
  for (const auto& node : nodes_) {
    Node& n = *node;
    if (n.state != v1::NODE_DEAD) continue;
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
      WarnRemovedOverflow(&n);
      continue;
    }
    patterns.push_back(pattern);
  }
}

void Master::WarnRemovedOverflow(Node* n) {
  if (n->removed_while_dead_overflow) return;
  n->removed_while_dead_overflow = true;
  SHELF_LOG(WARNING) << "too many keys removed while a store was dead: some may come back "
                        "when it registers again"
                     << Kv("node", n->endpoint.node_id());
}

}  // namespace shelf
