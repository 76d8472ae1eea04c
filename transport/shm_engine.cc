#include "transport/shm_engine.h"

#include <cstring>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/net.h"

namespace shelf::transport {

bool ShmEngine::Reaches(const Peer& peer) const {
  return !peer.route(Kind::kShm).empty() && peer.host_id == HostId();
}

absl::StatusOr<std::shared_ptr<ShmMapping>> ShmEngine::MappingOf(const Peer& peer) {
  absl::StatusOr<std::shared_ptr<ShmMapping>> map =
      attachments_.Get(peer.route(Kind::kShm), peer.incarnation);
  if (!map.ok()) {
    return absl::UnavailableError(absl::StrCat("shared memory of store ", peer.node_id,
                                               " unavailable: ", map.status().message()));
  }
  return map;
}

absl::Status ShmEngine::ReadSsd(const Peer& peer, const std::string& key, char* dst, uint64_t size,
                                absl::string_view read_grant, uint64_t deadline_ms) {
  const std::string& socket = peer.route(Kind::kShm);
  absl::StatusOr<std::shared_ptr<ShmMapping>> map = MappingOf(peer);
  if (!map.ok()) return map.status();
  ShmMapping& m = **map;
  absl::Status s = attachments_.ReadSsd(
      m, key, size, read_grant, deadline_ms,
      [&](uint32_t segment_id, uint64_t offset, uint64_t length) {
        if (m.arenas || segment_id != m.segment_id || offset > m.size || length > m.size - offset) {
          return absl::UnavailableError(absl::StrCat("store ", peer.node_id, " pinned [", offset,
                                                     ", +", length,
                                                     ") outside its mapped segment"));
        }
        if (length != size) {
          return absl::FailedPreconditionError(
              absl::StrCat("the SSD block has ", length, " bytes, not ", size));
        }
        std::memcpy(dst, m.base + offset, length);
        return absl::OkStatus();
      });
  if (s.code() == absl::StatusCode::kUnavailable) attachments_.Forget(socket);
  return s;
}

absl::StatusOr<const char*> ShmEngine::ReadSource(ShmMapping& m, const std::string& socket,
                                                  const Peer& peer, uint32_t segment_id,
                                                  uint64_t offset, uint64_t length,
                                                  absl::string_view grant) {
  if (m.arenas) {
    // Each arena is mapped the first time it is read from, for this read's
    // grant: the store hands only arenas the grant reaches.
    absl::StatusOr<const char*> base =
        offset > m.size || length > m.size - offset
            ? absl::OutOfRangeError(absl::StrCat("[", offset, ", +", length,
                                                 ") is past an arena of ", m.size, " bytes"))
            : attachments_.Arena(m, segment_id, offset, length, grant);
    if (!base.ok()) {
      if (base.status().code() == absl::StatusCode::kUnavailable) attachments_.Forget(socket);
      return absl::UnavailableError(absl::StrCat("arena ", segment_id, " of store ", peer.node_id,
                                                 " not mapped: ", base.status().message()));
    }
    return *base + offset;
  }
  if (m.segment_id != segment_id || offset > m.size || length > m.size - offset) {
    // The socket may belong to a restarted store: map it afresh next time.
    attachments_.Forget(socket);
    return absl::UnavailableError(absl::StrCat(
        "store ", peer.node_id, "'s mapped segment ", m.segment_id, " (", m.size,
        " bytes) does not hold segment ", segment_id, " [", offset, ", +", length, ")"));
  }
  return m.base + offset;
}

absl::Status ShmEngine::ReadView(const Peer& peer, uint32_t segment_id, uint64_t offset,
                                 uint64_t length, absl::string_view grant,
                                 absl::FunctionRef<void(const char*)> view) {
  absl::StatusOr<HeldView> held = HoldView(peer, segment_id, offset, length, grant);
  if (!held.ok()) return held.status();
  view(held->data);  // held->mapping keeps the bytes mapped meanwhile
  return absl::OkStatus();
}

absl::StatusOr<ShmEngine::HeldView> ShmEngine::HoldView(const Peer& peer, uint32_t segment_id,
                                                        uint64_t offset, uint64_t length,
                                                        absl::string_view grant) {
  const std::string& socket = peer.route(Kind::kShm);
  absl::StatusOr<std::shared_ptr<ShmMapping>> map = MappingOf(peer);
  if (!map.ok()) return map.status();
  absl::StatusOr<const char*> source =
      ReadSource(**map, socket, peer, segment_id, offset, length, grant);
  if (!source.ok()) return source.status();
  return HeldView{*std::move(map), *source};
}

absl::Status ShmEngine::CopyIfCurrent(const Peer& peer, uint32_t segment_id, uint64_t offset,
                                      uint64_t length, uint64_t tag, char* dst) {
  const std::string& socket = peer.route(Kind::kShm);
  absl::StatusOr<std::shared_ptr<ShmMapping>> map = MappingOf(peer);
  if (!map.ok()) return map.status();
  ShmMapping& m = **map;
  const KeyBoardView* board = m.board.get();
  if (board == nullptr) {
    return absl::UnimplementedError(absl::StrCat("store ", peer.node_id, " keeps no key board"));
  }
  absl::StatusOr<const char*> source = ReadSource(m, socket, peer, segment_id, offset, length, "");
  if (!source.ok()) return source.status();
  if (!board->CopyIfMarked(m.base, offset, length, tag, dst)) {
    return absl::FailedPreconditionError(
        absl::StrCat("store ", peer.node_id, "'s key board does not mark the block at ", offset));
  }
  return absl::OkStatus();
}

bool ShmEngine::Vouches(const Peer& peer) {
  std::shared_ptr<ShmMapping> m = attachments_.Mapped(peer.route(Kind::kShm), peer.incarnation);
  return m != nullptr && m->board != nullptr && m->board->Trusted();
}

bool ShmEngine::Marks(const Peer& peer, uint64_t offset, uint64_t tag) {
  std::shared_ptr<ShmMapping> m = attachments_.Mapped(peer.route(Kind::kShm), peer.incarnation);
  return m != nullptr && m->board != nullptr && m->board->Marked(offset, tag);
}

void ShmEngine::Start(std::shared_ptr<Batch> batch, std::vector<Work> work,
                      uint64_t /*deadline_ms*/) {
  // Writes, per attachment: sent as one pipelined batch each, after the
  // reads (which are memcpys, done here).
  struct Writes {
    std::shared_ptr<ShmMapping> mapping;
    std::string socket;
    std::vector<ShmWriter::WriteOp> ops;
    std::vector<size_t> indexes;
  };
  std::map<ShmMapping*, Writes> writes;
  for (const Work& w : work) {
    const Op& op = w.op;
    const std::string& socket = op.peer->route(Kind::kShm);
    absl::StatusOr<std::shared_ptr<ShmMapping>> map =
        attachments_.Get(socket, op.peer->incarnation);
    if (!map.ok()) {
      batch->Complete(
          w.index, absl::UnavailableError(absl::StrCat("shared memory of store ", op.peer->node_id,
                                                       " unavailable: ", map.status().message())));
      continue;
    }
    ShmMapping& m = **map;
    if (op.kind == OpKind::kRead) {
      absl::StatusOr<const char*> source =
          ReadSource(m, socket, *op.peer, op.segment_id, op.remote_offset, op.length, op.grant);
      if (source.ok()) std::memcpy(w.local, *source, op.length);
      batch->Complete(w.index, source.status());
      continue;
    }
    if ((!m.arenas && m.segment_id != op.segment_id) || op.remote_offset > m.size ||
        op.length > m.size - op.remote_offset) {
      // The socket may belong to a restarted store: map it afresh next time.
      attachments_.Forget(socket);
      batch->Complete(w.index, absl::UnavailableError(absl::StrCat(
                                   "store ", op.peer->node_id, "'s mapped segment ", m.segment_id,
                                   " (", m.size, " bytes) does not hold segment ", op.segment_id,
                                   " [", op.remote_offset, ", +", op.length, ")")));
      continue;
    }
    // The mapping is read-only: the store copies the block in, once it has
    // checked the put's grant (transport/shm_write.h).
    Writes& to = writes[&m];
    if (to.mapping == nullptr) {
      to.mapping = *map;
      to.socket = socket;
    }
    to.ops.push_back(ShmWriter::WriteOp{op.segment_id, op.remote_offset,
                                        static_cast<const char*>(w.local), op.length, op.grant});
    to.indexes.push_back(w.index);
  }
  for (auto& [unused, to] : writes) {
    std::vector<absl::Status> results(to.ops.size());
    to.mapping->writer->WriteBatch(to.ops, absl::MakeSpan(results));
    bool broken = false;
    for (size_t k = 0; k < results.size(); ++k) {
      broken = broken || results[k].code() == absl::StatusCode::kUnavailable;
      batch->Complete(to.indexes[k], std::move(results[k]));
    }
    if (broken) attachments_.Forget(to.socket);
  }
}

}  // namespace shelf::transport
