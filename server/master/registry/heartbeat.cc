// Heartbeats, and the orders and notices they carry (docs/master.md,
// "Heartbeat orders"): numbered per store, kept until acknowledged, sent
// again in every answer until then.
#include <algorithm>
#include <cstdint>

#include "common/sync_point.h"
#include "server/master/master.h"

namespace shelf::master {

absl::Status Master::Heartbeat(const v1::HeartbeatRequest& req, v1::HeartbeatResponse* resp) {
  SHELF_SYNC_POINT("Master::Heartbeat:Start");
  uint64_t now = clock_->NowMs();
  WriterMutexLock lock(&mu_);
  if (absl::Status s = CheckLeaderLocked(false); !s.ok()) return s;
  resp->set_term(leadership_.term());
  auto it = node_by_id_.find(req.node_id());
  if (it == node_by_id_.end() || nodes_[it->second]->state == v1::NODE_DEAD ||
      nodes_[it->second]->incarnation != req.incarnation()) {
    resp->set_reregister(true);
    return absl::OkStatus();
  }
  uint32_t idx = it->second;
  Node& n = *nodes_[idx];
  const uint64_t registration = n.registration_id;
  if (req.registration_id() != 0 && req.registration_id() != registration) {
    // Not this registration's: sent before the store registered again (a
    // call that timed out, so nobody reads this answer), or from a store
    // whose own registration answer was lost to a later one. Its
    // acknowledgement and reports are of that registration's numbers and
    // moves, perhaps of another master: ignored. A store that reads this
    // answer registers again.
    resp->set_reregister(true);
    return absl::OkStatus();
  }
  n.last_heartbeat_ms = now;
  n.acks_orders = req.acks_orders();
  if (n.acks_orders) ForgetAckedLocked(&n, req.orders_acked());
  for (const v1::TierMoveResult& m : req.moves()) {
    if (m.kind() == v1::TierMove::DROP_SSD) {
      DropReportedLocked(&n, m);
    } else if (m.kind() == v1::TierMove::VERIFY) {
      VerifyResultLocked(idx, m, now);
    } else {
      ApplyMoveResultLocked(idx, m, now);
    }
  }
  // Orders wake a long poll; so does the rest of an answer cut short.
  if (n.outbox.empty() && !n.answer_cut && req.wait_for_orders_ms() > 0) {
    // Long poll: hold the call until orders arrive (or the wait ends), so
    // a demotion starts as soon as it is ordered.
    uint64_t wait_ms = std::min<uint64_t>(req.wait_for_orders_ms(), options_.node_ttl_ms / 2);
    // The wait is on the node's own Wake, mu_ released: orders queued
    // from here on (under mu_, OrderLocked) set `woken`. A step-down
    // during the wait frees every Node (ResetLocked, which wakes every
    // waiter): the epoch says so before `n` is touched again.
    std::shared_ptr<Wake> wake = n.wake;
    const uint64_t epoch = reset_epoch_;
    {
      MutexLock w(&wake->mu);
      wake->woken = false;  // the outbox is empty: no order is pending
      // Notices not yet sent (queued since the last answer) end this poll
      // after the delay, as one queued during it does.
      wake->noticed = !n.notices.empty();
    }
    mu_.Unlock();
    {
      MutexLock w(&wake->mu);
      auto woken = [&wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake->mu) { return wake->woken; };
      auto either = [&wake]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(wake->mu) {
        return wake->woken || wake->noticed;
      };
      const uint64_t end = now + wait_ms;
      if (clock_->WaitUntil(&wake->mu, &wake->cv, end, either) && !wake->woken) {
        // A notice: wait a little longer for the notices of the same burst
        // of commits (or an order, which ends the wait at once).
        uint64_t by = std::min(end, clock_->NowMs() + options_.notice_delay_ms);
        clock_->WaitUntil(&wake->mu, &wake->cv, by, woken);
      }
    }
    mu_.Lock();
    if (reset_epoch_ != epoch) {
      resp->set_reregister(true);
      return absl::OkStatus();
    }
    if (n.state == v1::NODE_DEAD || n.incarnation != req.incarnation()) {
      resp->set_reregister(true);
      return absl::OkStatus();
    }
    if (n.registration_id != registration) {  // registered meanwhile
      resp->set_reregister(true);
      return absl::OkStatus();
    }
  }
  AnswerOrdersLocked(&n, resp);
  return absl::OkStatus();
}

void Master::DropReportedLocked(Node* n, const v1::TierMoveResult& result) {
  // Run, and synced before the report (Store::MoverLoop): the key is gone
  // from the store's SSD. A failed drop stays counted as not run. The key
  // must match: a report of an earlier registration's move may carry a
  // number this one reused.
  auto it = n->drops_unreported.find(result.move_id());
  if (result.ok() && it != n->drops_unreported.end() && it->second == result.key()) {
    n->drops_unreported.erase(it);
  }
}

void Master::ForgetAckedLocked(Node* n, uint64_t acked) {
  auto after = [acked](std::deque<v1::TierMove>* moves) {
    return std::partition_point(moves->begin(), moves->end(),
                                [acked](const v1::TierMove& m) { return m.seq() <= acked; });
  };
  n->outbox.erase(n->outbox.begin(), after(&n->outbox));
  n->notices.erase(n->notices.begin(), after(&n->notices));
}

void Master::AnswerOrdersLocked(Node* n, v1::HeartbeatResponse* resp) {
  if (!n->acks_orders) {
    // A store that does not acknowledge gets each order once, and
    // reports no drop.
    for (v1::TierMove& m : n->outbox) {
      if (m.kind() == v1::TierMove::DROP_SSD) n->drops_unreported.erase(m.move_id());
      // Nor does it answer a VERIFY (it predates them): nothing waits.
      if (m.kind() == v1::TierMove::VERIFY) n->verifies.erase(m.move_id());
      *resp->add_moves() = std::move(m);
    }
    for (v1::TierMove& m : n->notices) *resp->add_moves() = std::move(m);
    n->outbox.clear();
    n->notices.clear();
    return;
  }
  // Everything not acknowledged, lowest number first (both lists are in
  // order), up to the size bound: the store acknowledges the highest it
  // took, so what the bound leaves out goes in the next answer.
  auto o = n->outbox.begin(), t = n->notices.begin();
  size_t bytes = 0;
  n->answer_cut = false;
  while (o != n->outbox.end() || t != n->notices.end()) {
    if (bytes >= kHeartbeatAnswerBytesMax) {
      n->answer_cut = true;
      break;
    }
    const bool from_outbox = t == n->notices.end() || (o != n->outbox.end() && o->seq() < t->seq());
    const v1::TierMove& m = from_outbox ? *o++ : *t++;
    if (m.seq() <= n->sent_through) metrics_.heartbeat_orders_resent.Increment();
    bytes += m.ByteSizeLong();
    *resp->add_moves() = m;
  }
  if (resp->moves_size() > 0) {
    n->sent_through = std::max(n->sent_through, resp->moves(resp->moves_size() - 1).seq());
  }
}

void Master::OrderLocked(Node* n, v1::TierMove move) {
  move.set_seq(n->next_seq++);
  if (move.kind() == v1::TierMove::DROP_SSD) n->drops_unreported[move.move_id()] = move.key();
  n->outbox.push_back(std::move(move));
  n->wake->Notify();
}

void Master::QueueNoticeLocked(Node* n, v1::TierMove notice) {
  notice.set_seq(n->next_seq++);
  n->notices.push_back(std::move(notice));
  n->wake->NotifyNotice();
}

}  // namespace shelf::master
