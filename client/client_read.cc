// ClientImpl: gets. One Lookup answers every key's replicas (same host first,
// DRAM before SSD) with a read lease; the blocks are then read in parallel,
// each from the first replica that answers with the right bytes.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstring>
#include <functional>
#include <memory>

#include "absl/strings/str_cat.h"
#include "client/client_impl.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/log.h"
#include "common/net.h"
#include "transport/shm_board.h"

namespace shelf {
namespace {

// Time a lease release may take: it lets eviction take the blocks sooner
// but is not needed for correctness (the lease runs out on its own).
constexpr uint64_t kReleaseTimeoutMs = 1000;
// How long the releaser gathers keys before it sends them, and how many
// may wait (beyond that, leases run out on their own).
constexpr uint64_t kReleaseGatherMs = 2;
constexpr size_t kReleaseQueueMax = size_t{64} * 1024;
// A cached read of a same-host DRAM block costs a round trip to its store
// (the check after the copy) unless the store's key board vouches for it,
// where a Lookup costs one round trip for the whole batch: batches larger
// than this read such blocks of stores without a board through the
// master. TCP reads cost a round trip per block either way.
constexpr size_t kCachedShmBatchMax = 4;
// A same-host block this large is leased where it lies rather than copied
// out of a cached location: a reader that uses blocks in place
// (BatchGetViews) asks the master for it, with no copy, where a smaller one
// is copied (BatchGetViewsCached's default bound, one below this).
constexpr uint64_t kInPlaceMinBytes = Client::kCachedViewBytesMax + 1;

// Puts each replica's store back from the answer's table (a lookup asked
// with `store_table`), so the rest of the client reads `replica.store()`
// as from a master that sends it inline (older masters do, and are
// unaffected: their replicas have a store).
absl::Status InlineStores(v1::LookupResponse* resp) {
  for (v1::ObjectLocation& loc : *resp->mutable_objects()) {
    for (v1::Replica& rep : *loc.mutable_replicas()) {
      if (rep.has_store()) continue;
      if (rep.store_index() >= static_cast<uint32_t>(resp->stores_size())) {
        return absl::InternalError("malformed lookup response: a replica names no store");
      }
      *rep.mutable_store() = resp->stores(static_cast<int>(rep.store_index()));
    }
  }
  return absl::OkStatus();
}

}  // namespace

bool ClientImpl::Offers(const v1::StoreEndpoint& store, v1::TransportKind kind) {
  if (store.transports_size() == 0) {
    return kind == v1::TRANSPORT_TCP || (kind == v1::TRANSPORT_SHM && !store.shm_socket().empty());
  }
  for (int t : store.transports()) {
    if (t == kind) return true;
  }
  return false;
}

transport::Peer ClientImpl::PeerOf(const v1::StoreEndpoint& store) const {
  transport::Peer peer;
  peer.node_id = store.node_id();
  peer.incarnation = store.incarnation();
  peer.host_id = store.host_id();
  if (options_.allow_tcp && Offers(store, v1::TRANSPORT_TCP)) {
    peer.set_route(transport::Kind::kTcp, store.data_address());
  }
  if (options_.allow_shm && Offers(store, v1::TRANSPORT_SHM)) {
    peer.set_route(transport::Kind::kShm, store.shm_socket());
  }
  if (rdma_ != nullptr && Offers(store, v1::TRANSPORT_RDMA)) {
    peer.set_route(transport::Kind::kRdma, store.data_address());
  }
  return peer;
}

bool ClientImpl::AskedCached(const v1::ObjectLocation& loc) {
  const v1::Replica& r = loc.replicas(0);
  if (r.tier() != v1::TIER_DRAM) return false;
  const transport::Peer peer = PeerOf(r.store());
  return shm_.Reaches(peer) && !shm_.Vouches(peer);
}

bool ClientImpl::SameHostDram(const v1::ObjectLocation& loc) {
  const v1::Replica& r = loc.replicas(0);
  return r.tier() == v1::TIER_DRAM && shm_.Reaches(PeerOf(r.store()));
}

absl::Status ClientImpl::MoveReplica(transport::OpKind kind, const v1::Replica& replica,
                                     const v1::WriteGrant* grant, char* local, uint64_t size,
                                     uint64_t deadline_ms, const char** transport,
                                     absl::string_view key) {
  const transport::Peer peer = PeerOf(replica.store());
  transport::Op op;
  op.kind = kind;
  op.peer = &peer;
  op.segment_id = replica.segment_id();
  op.remote_offset = replica.offset();
  op.length = size;
  if (grant != nullptr) {
    op.grant = transport::wire::EncodeGrant(ToWireGrant(*grant));
  } else if (kind == transport::OpKind::kRead && !replica.read_grant().empty()) {
    op.grant = absl::StrCat(replica.read_grant(), key);  // the read credential
  }
  absl::Status last =
      absl::UnavailableError("no shared transport with store " + replica.store().data_address());
  // Best first. RDMA writes only as pulls by the store, under the put's
  // grant (ClientOptions::rdma_store_pull_puts).
  transport::Engine* const engines[] = {
      &shm_,
      kind == transport::OpKind::kRead || options_.rdma_store_pull_puts ? rdma_.get() : nullptr,
      &tcp_};
  for (transport::Engine* engine : engines) {
    if (engine == nullptr || !engine->Reaches(peer)) continue;
    *transport = transport::KindName(engine->kind());
    absl::StatusOr<transport::MemoryHandle> handle =
        engine->RegisterMemory(local, size, transport::MemoryKind::kHost);
    if (!handle.ok()) {
      // An RDMA registration that fails (the locked-memory limit) leaves
      // the next transport; TCP registers nothing and cannot fail here.
      last = handle.status();
      continue;
    }
    op.local = *handle;
    last = engine->Execute({&op, 1}, deadline_ms);
    engine->UnregisterMemory(*handle).IgnoreError();
    // Shared memory fails when the mapping is gone or stale (a restarted
    // store), RDMA when its queue pair cannot be made: the same replica is
    // then moved over the next transport.
    if (last.ok() || engine->kind() == transport::Kind::kTcp) return last;
  }
  return last;
}

const std::string& StoreKey(const v1::ObjectLocation& loc) {
  return loc.store_key().empty() ? loc.key() : loc.store_key();
}

absl::Status ClientImpl::ReadSsdShm(const v1::StoreEndpoint& store, const std::string& key,
                                    char* dst, uint64_t size, const std::string& read_grant,
                                    uint64_t deadline_ms, const char** transport) {
  // A store on this host reads the block into a pinned range of its
  // segment and this client copies it from there: no socket carries the
  // bytes. Callers go on over TCP after any failure but corrupt bytes (an
  // older store, a full window, the block moved to DRAM meanwhile); TCP
  // also looks at the store's DRAM records.
  if (!options_.allow_shm || !Offers(store, v1::TRANSPORT_SHM)) {
    return absl::UnimplementedError("no shared memory with this store");
  }
  const transport::Peer peer = PeerOf(store);
  if (!shm_.Reaches(peer)) return absl::UnimplementedError("the store is on another host");
  *transport = "shm";
  return shm_.ReadSsd(peer, key, dst, size, read_grant, deadline_ms);
}

absl::Status ClientImpl::ReadReplica(const v1::Replica& replica, const std::string& key, char* dst,
                                     uint64_t size, uint64_t deadline_ms, const char** transport) {
  const v1::StoreEndpoint& store = replica.store();
  if (replica.tier() == v1::TIER_SSD) {
    absl::Status shm_status =
        ReadSsdShm(store, key, dst, size, replica.read_grant(), deadline_ms, transport);
    if (shm_status.ok() || shm_status.code() == absl::StatusCode::kDataLoss ||
        shm_status.code() == absl::StatusCode::kDeadlineExceeded) {
      return shm_status;
    }
    *transport = "tcp";
    if (!options_.allow_tcp || !Offers(store, v1::TRANSPORT_TCP)) {
      return shm_status.code() == absl::StatusCode::kUnimplemented
                 ? absl::UnavailableError("SSD reads need the tcp transport, on both ends")
                 : shm_status;
    }
    return tcp_.client().ReadKey(store.data_address(), key, size, dst, deadline_ms, 0,
                                 replica.read_grant());
  }
  return MoveReplica(transport::OpKind::kRead, replica, nullptr, dst, size, deadline_ms, transport,
                     key);
}

absl::Status ClientImpl::ReadCachedReplica(const v1::ObjectLocation& loc, char* dst,
                                           uint64_t deadline_ms, const char** transport) {
  const v1::Replica& r = loc.replicas(0);
  const v1::StoreEndpoint& store = r.store();
  if (r.tier() == v1::TIER_SSD) {
    // The SSD tier keeps no generation, over TCP either: the checksum after
    // the copy tells whether the bytes are the cached block's.
    if (absl::Status s = ReadSsdShm(store, StoreKey(loc), dst, loc.size(), r.read_grant(),
                                    deadline_ms, transport);
        s.ok() || s.code() == absl::StatusCode::kDataLoss ||
        s.code() == absl::StatusCode::kDeadlineExceeded) {
      return s;
    }
  }
  if (r.tier() == v1::TIER_DRAM) {
    const transport::Peer peer = PeerOf(store);
    if (shm_.Reaches(peer)) {
      // The store's key board tells, in shared memory, what a check by key
      // would: the copy is the block of this commit, the key's current one
      // as the store's records say, and no write touched it meanwhile
      // (docs/client.md, "Cached reads"). Its "no" is the store's answer
      // too; only a store that keeps no board is asked.
      absl::Status s =
          shm_.CopyIfCurrent(peer, r.segment_id(), r.offset(), loc.size(),
                             transport::KeyBoardTag(StoreKey(loc), loc.generation()), dst);
      if (s.ok()) {
        *transport = "shm";
        stats_.cache_board_reads.fetch_add(1);
        return s;
      }
      if (s.code() == absl::StatusCode::kFailedPrecondition) return s;
    }
  }
  // Both forms ask the store over TCP: a client that may not use it has no
  // way to learn whether the cached location still holds the key.
  *transport = "tcp";
  if (!options_.allow_tcp || !Offers(store, v1::TRANSPORT_TCP)) {
    return absl::UnavailableError("cached reads need the tcp transport, on both ends");
  }
  if (r.tier() == v1::TIER_DRAM) {
    const transport::Peer peer = PeerOf(store);
    if (shm_.Reaches(peer)) {
      // Ask, and copy while the store answers: the store confirming that
      // the key had this generation, at the range copied, at a moment after
      // the read began, and the bytes matching that generation's checksum
      // (ReadObject), make the bytes the block that was the key's current
      // one at that moment (docs/client.md, "Cached reads").
      absl::Status copied;
      absl::Status checked = tcp_.client().CheckKeyWhile(
          store.data_address(), StoreKey(loc), loc.size(), loc.generation(), deadline_ms,
          r.read_grant(),
          [&] {
            copied = MoveReplica(transport::OpKind::kRead, r, nullptr, dst, loc.size(), deadline_ms,
                                 transport, StoreKey(loc));
          },
          transport::wire::KeyRange{r.segment_id(), r.offset()});
      if (!copied.ok()) return copied;
      if (std::strcmp(*transport, "shm") == 0) return checked;
      // The copy went over another transport (a stale mapping): read again
      // by key, where the store checks the generation.
    }
  }
  *transport = "tcp";
  return tcp_.client().ReadKey(store.data_address(), StoreKey(loc), loc.size(), dst, deadline_ms,
                               loc.generation(), r.read_grant());
}

absl::Status ClientImpl::ReadObject(const v1::ObjectLocation& loc, char* dst, uint64_t deadline_ms,
                                    bool cached) {
  absl::Status last = absl::UnavailableError("the block has no reachable replica");
  bool mismatch = false;
  // A cached location has one replica; its failure sends the read back to
  // the master, which knows the others.
  const int n = cached ? std::min(loc.replicas_size(), 1) : loc.replicas_size();
  for (int i = 0; i < n; ++i) {
    const v1::Replica& r = loc.replicas(i);
    if (i > 0) stats_.replica_failovers.fetch_add(1);
    const char* transport = "tcp";
    // A replica that takes the connection but never answers (a frozen
    // store, a cut link the master has not noticed yet) must not eat the
    // whole deadline: while others remain, this one gets an equal share of
    // the time left.
    uint64_t now = MonoMs();
    if (now >= deadline_ms) {
      last = absl::DeadlineExceededError("deadline passed before every replica was tried");
      break;
    }
    uint64_t attempt_deadline = deadline_ms;
    if (n - i > 1) attempt_deadline = now + (deadline_ms - now) / static_cast<uint64_t>(n - i);
    // A cached read that hangs (a frozen or cut-off store) must leave time
    // for the fallback: the master's answer and the other replicas.
    if (cached) attempt_deadline = now + (deadline_ms - now) / 2;
    absl::Status s =
        cached ? ReadCachedReplica(loc, dst, attempt_deadline, &transport)
               : ReadReplica(r, StoreKey(loc), dst, loc.size(), attempt_deadline, &transport);
    if (!s.ok()) {
      // A store that found its own copy corrupt (an SSD extent) says so.
      if (!cached && s.code() == absl::StatusCode::kDataLoss) {
        ReportDataLoss(loc.key(), loc.generation(), r, deadline_ms);
      }
      last = s;
      continue;
    }
    // The lease protects the range only until it ends: bytes read after
    // that may belong to another block, so the read does not count.
    if (loc.lease_expires_unix_ms() != 0 && UnixMs() > loc.lease_expires_unix_ms()) {
      last = absl::DeadlineExceededError("read lease expired during the read");
      continue;
    }
    // No lease protects a cached location's range: its bytes are always
    // checked.
    bool verify = options_.verify_checksums || r.tier() == v1::TIER_SSD || cached;
    if (verify && BlockChecksum(dst, loc.size()) != loc.checksum()) {
      // A cached location's range may hold another block by now (the
      // store's records lag): that is a fallback, not a corrupt replica.
      if (!cached) {
        stats_.checksum_mismatches.fetch_add(1);
        // Read under a lease: the range held this block, so the replica is
        // corrupt. The master drops it, so later readers go elsewhere.
        ReportDataLoss(loc.key(), loc.generation(), r, deadline_ms);
      }
      mismatch = true;
      last = absl::DataLossError(
          absl::StrCat("checksum mismatch from store ", r.store().data_address()));
      continue;
    }
    CountLoaded(loc.size(), r.tier(), transport);
    return absl::OkStatus();
  }
  if (mismatch && last.code() != absl::StatusCode::kDataLoss) {
    return absl::DataLossError("every replica failed or had wrong bytes");
  }
  return last;
}

void ClientImpl::CountLoaded(uint64_t bytes, v1::Tier tier, const char* transport) {
  stats_.bytes_loaded.fetch_add(bytes);
  if (tier == v1::TIER_SSD) {
    stats_.bytes_loaded_ssd.fetch_add(bytes);
    stats_.blocks_loaded_ssd.fetch_add(1);
  } else {
    stats_.blocks_loaded_dram.fetch_add(1);
  }
  (std::strcmp(transport, "shm") == 0    ? stats_.bytes_loaded_shm
   : std::strcmp(transport, "rdma") == 0 ? stats_.bytes_loaded_rdma
                                         : stats_.bytes_loaded_tcp)
      .fetch_add(bytes);
}

namespace {

// Copies [data, data + size) across `pieces`, in order.
void Scatter(const char* data, size_t size, const std::vector<std::pair<void*, size_t>>& pieces) {
  size_t at = 0;
  for (const auto& [piece, bytes] : pieces) {
    if (at == size) break;
    const size_t n = std::min(bytes, size - at);
    std::memcpy(piece, data + at, n);
    at += n;
  }
}

}  // namespace

absl::Status ClientImpl::ReadToPieces(const v1::ObjectLocation& loc,
                                      const std::vector<std::pair<void*, size_t>>& pieces,
                                      std::string* scratch, uint64_t deadline_ms, bool cached) {
  const v1::Replica& r = loc.replicas(0);
  if (!cached && r.tier() == v1::TIER_DRAM && options_.allow_shm &&
      Offers(r.store(), v1::TRANSPORT_SHM)) {
    const transport::Peer peer = PeerOf(r.store());
    if (shm_.Reaches(peer)) {
      // The block, as ReadObject would have copied it, lies in the store's
      // mapped segment under this read's lease: check it there and copy it
      // once, into the pieces. Anything amiss (no mapping, wrong bytes, a
      // lease that ended during the copy) goes the whole way below, which
      // tries every replica and reports a corrupt one.
      bool copied = false;
      absl::Status s = shm_.ReadView(
          peer, r.segment_id(), r.offset(), loc.size(),
          r.read_grant().empty() ? std::string() : absl::StrCat(r.read_grant(), StoreKey(loc)),
          [&](const char* data) {
            if (options_.verify_checksums && BlockChecksum(data, loc.size()) != loc.checksum()) {
              return;
            }
            Scatter(data, loc.size(), pieces);
            copied = true;
          });
      const bool leased =
          loc.lease_expires_unix_ms() == 0 || UnixMs() <= loc.lease_expires_unix_ms();
      if (s.ok() && copied && leased) {
        CountLoaded(loc.size(), r.tier(), "shm");
        return absl::OkStatus();
      }
    }
  }
  scratch->resize(loc.size());
  if (absl::Status s = ReadObject(loc, scratch->data(), deadline_ms, cached); !s.ok()) return s;
  Scatter(scratch->data(), loc.size(), pieces);
  return absl::OkStatus();
}

Status ClientImpl::BatchGetIntoPieces(const std::vector<PiecesItem>& items,
                                      std::vector<Status>* statuses, std::vector<size_t>* sizes,
                                      Deadline deadline) {
  if (statuses == nullptr) {
    return Status(StatusCode::kInvalidArgument, "BatchGetIntoPieces: null statuses");
  }
  statuses->clear();  // empty unless the batch as a whole succeeds
  if (sizes != nullptr) sizes->clear();
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateBatchSize(items.size(), "blocks"); !s.ok()) return FromAbsl(s);
  std::vector<absl::Status> results(items.size());
  std::vector<size_t> sent;  // items whose key and pieces are fine
  std::vector<const std::string*> keys;
  std::vector<size_t> capacity(items.size(), 0);
  for (size_t i = 0; i < items.size(); ++i) {
    absl::Status v = ValidateKey(items[i].key);
    if (v.ok() && items[i].pieces.empty()) v = absl::InvalidArgumentError("an item has no pieces");
    for (const auto& [piece, bytes] : items[i].pieces) {
      if (v.ok() && (piece == nullptr || bytes == 0)) {
        v = absl::InvalidArgumentError("a piece is null or empty");
      }
      capacity[i] += bytes;
    }
    if (!v.ok()) {
      results[i] = v;
      continue;
    }
    sent.push_back(i);
    keys.push_back(&items[i].key);
  }
  std::vector<size_t> found(items.size(), 0);
  std::vector<absl::Status> read;
  absl::Status s = LookupAndRead(
      keys, deadline_ms,
      [&](size_t j, const v1::ObjectLocation& loc, bool cached) {
        const size_t i = sent[j];
        found[i] = loc.size();
        if (loc.size() > capacity[i]) {
          return absl::OutOfRangeError(absl::StrCat("block of ", loc.size(),
                                                    " bytes does not fit pieces of ", capacity[i],
                                                    " bytes; nothing was read"));
        }
        thread_local std::string scratch;
        return ReadToPieces(loc, items[i].pieces, &scratch, deadline_ms, cached);
      },
      &read);
  if (!s.ok()) return FromAbsl(s);
  for (size_t j = 0; j < sent.size(); ++j) results[sent[j]] = read[j];
  statuses->reserve(items.size());
  for (const absl::Status& r : results) statuses->push_back(FromAbsl(r));
  if (sizes != nullptr) *sizes = std::move(found);
  return Status();
}

Status ClientImpl::BatchGetViews(const std::vector<std::string>& keys, const ViewsFn& use,
                                 Deadline deadline, uint64_t bytes_max) {
  if (!use) return Status(StatusCode::kInvalidArgument, "BatchGetViews: no callback");
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
  std::vector<const std::string*> key_ptrs;
  key_ptrs.reserve(keys.size());
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
    key_ptrs.push_back(&k);
  }
  if (ViewsOnKeptLeases(keys, use, bytes_max)) return Status::Ok();
  const uint64_t drops_before = KeptLeaseDrops();
  const size_t n = keys.size();
  std::vector<char> kept(n, 0);  // leases kept for later calls (KeepLease)
  std::vector<BlockView> views(n);
  // What keeps each view's bytes: the store's mapping (in place), or a
  // copy of the call's own (left uninitialized until the read fills it).
  std::vector<std::shared_ptr<const void>> mappings(n);
  std::vector<std::unique_ptr<char[]>> copies(n);
  std::vector<uint64_t> lease_until_unix_ms(n, 0);  // in-place views only
  std::vector<char> counted(n, 0);                  // against bytes_max (not bits: threads)
  std::atomic<uint64_t> bytes_taken{0};
  std::vector<absl::Status> statuses;
  absl::Status batch = LookupAndRead(
      key_ptrs, deadline_ms,
      [&](size_t i, const v1::ObjectLocation& loc, bool cached) -> absl::Status {
        // A cached read that failed comes back here with the master's
        // answer: its block is counted once.
        if (bytes_max != 0 && counted[i] == 0) {
          if (bytes_taken.fetch_add(loc.size()) + loc.size() > bytes_max) {
            bytes_taken.fetch_sub(loc.size());
            return absl::ResourceExhaustedError(absl::StrCat("block of ", loc.size(),
                                                             " bytes would take the views past ",
                                                             bytes_max, " bytes; not read"));
          }
          counted[i] = 1;
        }
        const v1::Replica& r = loc.replicas(0);
        // In place only under a lease: it alone keeps the range this
        // block's until the bytes are used (a cached location has none).
        if (!cached && loc.lease_expires_unix_ms() != 0 && r.tier() == v1::TIER_DRAM &&
            options_.allow_shm && Offers(r.store(), v1::TRANSPORT_SHM)) {
          const transport::Peer peer = PeerOf(r.store());
          if (shm_.Reaches(peer)) {
            absl::StatusOr<transport::ShmEngine::HeldView> held =
                shm_.HoldView(peer, r.segment_id(), r.offset(), loc.size(),
                              r.read_grant().empty() ? std::string()
                                                     : absl::StrCat(r.read_grant(), StoreKey(loc)));
            // Checked whatever verify_checksums says: the bytes leave this
            // process as they are. Anything amiss goes the whole way below,
            // which tries every replica and reports a corrupt one.
            if (held.ok() && BlockChecksum(held->data, loc.size()) == loc.checksum() &&
                UnixMs() <= loc.lease_expires_unix_ms()) {
              views[i].data = held->data;
              views[i].size = loc.size();
              views[i].in_place = true;
              kept[i] =
                  KeepLease(*key_ptrs[i], loc, held->mapping, held->data, drops_before) ? 1 : 0;
              mappings[i] = std::move(held->mapping);
              lease_until_unix_ms[i] = loc.lease_expires_unix_ms();
              CountLoaded(loc.size(), r.tier(), "shm");
              return absl::OkStatus();
            }
          }
        }
        copies[i].reset(new char[loc.size()]);
        if (absl::Status s = ReadObject(loc, copies[i].get(), deadline_ms, cached); !s.ok()) {
          return s;
        }
        views[i].data = copies[i].get();
        views[i].size = loc.size();
        return absl::OkStatus();
      },
      &statuses,
      [&] {
        const uint64_t now_unix_ms = UnixMs();
        uint64_t until_unix_ms = UINT64_MAX;
        for (size_t i = 0; i < n; ++i) {
          views[i].status = FromAbsl(statuses[i]);
          if (!statuses[i].ok() || !views[i].in_place) continue;
          if (now_unix_ms > lease_until_unix_ms[i]) {
            // The lease ran out between the read and now (a stalled
            // thread): the range may hold another block already.
            views[i] = BlockView{Status(StatusCode::kDeadlineExceeded,
                                        "read lease expired before the block was used"),
                                 nullptr, 0, false};
            continue;
          }
          until_unix_ms = std::min(until_unix_ms, lease_until_unix_ms[i]);
        }
        const uint64_t use_by_mono_ms =
            until_unix_ms == UINT64_MAX ? UINT64_MAX : MonoMs() + (until_unix_ms - now_unix_ms) / 2;
        use(views, use_by_mono_ms);
      },
      /*in_place=*/true, &kept);
  return FromAbsl(batch);
}

Status ClientImpl::BatchGetViewsCached(const std::vector<std::string>& keys, const ViewsFn& use,
                                       uint64_t bytes_max, uint64_t block_bytes_max) {
  if (!use) return Status(StatusCode::kInvalidArgument, "BatchGetViewsCached: no callback");
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(Deadline(), &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
  if (cache_ == nullptr) return Status(StatusCode::kUnavailable, "no location cache");
  const size_t n = keys.size();
  const uint64_t now_unix_ms = UnixMs();
  std::vector<v1::ObjectLocation> locs(n);
  std::vector<transport::Peer> peers(n);
  uint64_t total = 0;
  for (size_t i = 0; i < n; ++i) {
    if (absl::Status s = ValidateKey(keys[i]); !s.ok()) return FromAbsl(s);
    if (!cache_->Get(keys[i], &locs[i], now_unix_ms)) {
      return Status(StatusCode::kUnavailable, "a key's location is not cached");
    }
    const v1::Replica& r = locs[i].replicas(0);
    if (r.tier() != v1::TIER_DRAM) return Status(StatusCode::kUnavailable, "a block is on SSD");
    if (locs[i].size() > block_bytes_max) {
      return Status(StatusCode::kUnavailable, "a block is larger than the copies' bound");
    }
    peers[i] = PeerOf(r.store());
    if (!shm_.Reaches(peers[i]) || !shm_.Vouches(peers[i])) {
      return Status(StatusCode::kUnavailable, "a block's store keeps no board mapped here");
    }
    total += locs[i].size();
    if (bytes_max != 0 && total > bytes_max) {
      return Status(StatusCode::kUnavailable, "the blocks are over the bound");
    }
  }
  std::vector<std::unique_ptr<char[]>> copies(n);
  std::vector<BlockView> views(n);
  for (size_t i = 0; i < n; ++i) {
    const v1::ObjectLocation& loc = locs[i];
    const v1::Replica& r = loc.replicas(0);
    copies[i].reset(new char[loc.size()]);
    absl::Status s = shm_.CopyIfCurrent(peers[i], r.segment_id(), r.offset(), loc.size(),
                                        transport::KeyBoardTag(StoreKey(loc), loc.generation()),
                                        copies[i].get());
    if (s.ok() && BlockChecksum(copies[i].get(), loc.size()) != loc.checksum()) {
      s = absl::DataLossError("checksum mismatch");
    }
    if (!s.ok()) {
      // As a failed cached read: the next read asks the master.
      cache_->Erase(keys[i]);
      stats_.cache_fallbacks.fetch_add(1);
      metrics_.cache_fallbacks.Increment(1);
      return Status(StatusCode::kUnavailable, std::string(s.message()));
    }
    views[i] = BlockView{Status::Ok(), copies[i].get(), loc.size(), false};
  }
  for (const v1::ObjectLocation& loc : locs) CountLoaded(loc.size(), v1::TIER_DRAM, "shm");
  stats_.cache_hits.fetch_add(n);
  stats_.cache_board_reads.fetch_add(n);
  metrics_.cache_hits.Increment(static_cast<double>(n));
  use(views, UINT64_MAX);
  return Status::Ok();
}

void ClientImpl::ReportDataLoss(const std::string& key, uint64_t generation,
                                const v1::Replica& replica, uint64_t deadline_ms) {
  if (replica.read_grant().empty()) return;
  v1::ReportDataLossRequest req;
  req.set_key(key);
  req.set_generation(generation);
  *req.mutable_replica() = replica;
  v1::ReportDataLossResponse resp;
  // Bounded: the read goes on to the next replica either way.
  const uint64_t report_deadline = std::min(deadline_ms, MonoMs() + kReleaseTimeoutMs);
  absl::Status s =
      CallMaster(&v1::MasterService::Stub::ReportDataLoss, req, &resp, report_deadline);
  if (!s.ok()) {
    SHELF_LOG(WARNING) << "data loss report failed" << Kv("store", replica.store().data_address())
                       << Kv("error", s.message());
  }
}

absl::Status ClientImpl::ReadToTarget(const v1::ObjectLocation& loc, const ReadTarget& target,
                                      uint64_t deadline_ms, bool cached) {
  if (loc.size() > target.capacity) {
    return absl::OutOfRangeError(absl::StrCat("block of ", loc.size(),
                                              " bytes does not fit the buffer of ", target.capacity,
                                              " bytes; nothing was read"));
  }
  if (!target.gpu) return ReadObject(loc, target.data, deadline_ms, cached);
  // A cached location is checked against its store over tcp: staged. An
  // event to record without a stream to record it on: staged (its lane's
  // stream records it).
  if (target.rdma_registered && !cached &&
      (target.sync.event == nullptr || target.sync.stream != nullptr)) {
    absl::Status direct = ReadGpuDirect(loc, target, deadline_ms);
    if (direct.ok() || MonoMs() >= deadline_ms) return direct;
    // No rdma replica, or each failed: stage, through every transport.
  }
  absl::StatusOr<GpuStaging::Bounce> bounce = gpu_.Acquire(loc.size(), deadline_ms);
  if (!bounce.ok()) return bounce.status();
  if (absl::Status s = ReadObject(loc, bounce->data(), deadline_ms, cached); !s.ok()) return s;
  absl::Status s = gpu_.ToDevice(target.device, target.data, *bounce, loc.size(), target.sync);
  if (s.ok()) stats_.bytes_staged_gpu.fetch_add(loc.size());
  return s;
}

absl::Status ClientImpl::ReadGpuDirect(const v1::ObjectLocation& loc, const ReadTarget& target,
                                       uint64_t deadline_ms) {
  absl::Status last = absl::NotFoundError("no DRAM replica offers rdma");
  bool awaited = false;
  for (const v1::Replica& r : loc.replicas()) {
    if (r.tier() != v1::TIER_DRAM) continue;
    const transport::Peer peer = PeerOf(r.store());
    if (!rdma_->Reaches(peer)) continue;
    // The NIC writes the buffer outside any stream: the caller's earlier
    // work on its stream must be done first (GpuSync).
    if (!awaited) {
      if (absl::Status s = gpu_.AwaitBeforeDirect(target.device, target.sync); !s.ok()) return s;
      awaited = true;
    }
    // The buffer's own registration answers this one from the device's
    // cache: no registration per read.
    absl::StatusOr<transport::MemoryHandle> handle =
        rdma_->RegisterMemory(target.data, loc.size(), transport::MemoryKind::kGpu);
    if (!handle.ok()) return handle.status();
    transport::Op op;
    op.kind = transport::OpKind::kRead;
    op.local = *handle;
    op.peer = &peer;
    op.segment_id = r.segment_id();
    op.remote_offset = r.offset();
    op.length = loc.size();
    // Complete when Execute returns: the READ's completion follows the
    // bytes' arrival in GPU memory, so work the caller orders after this
    // call (any stream) reads them.
    last = rdma_->Execute({&op, 1}, deadline_ms);
    rdma_->UnregisterMemory(*handle).IgnoreError();
    if (!last.ok()) continue;
    if (loc.lease_expires_unix_ms() != 0 && UnixMs() > loc.lease_expires_unix_ms()) {
      last = absl::DeadlineExceededError("read lease expired during the read");
      continue;
    }
    if (options_.verify_checksums) {
      // The checksum is computed on the host: the bytes come back through a
      // bounce buffer (device to host, after the read) to be checked.
      absl::StatusOr<GpuStaging::Bounce> bounce = gpu_.Acquire(loc.size(), deadline_ms);
      if (!bounce.ok()) return bounce.status();
      if (absl::Status s = gpu_.FromDevice(target.device, &*bounce, target.data, loc.size());
          !s.ok()) {
        return s;
      }
      stats_.bytes_gpu_direct_checked.fetch_add(loc.size());
      if (BlockChecksum(bounce->data(), loc.size()) != loc.checksum()) {
        stats_.checksum_mismatches.fetch_add(1);
        last = absl::DataLossError(
            absl::StrCat("checksum mismatch from store ", r.store().data_address()));
        continue;
      }
    }
    stats_.bytes_loaded.fetch_add(loc.size());
    stats_.blocks_loaded_dram.fetch_add(1);
    stats_.bytes_loaded_rdma.fetch_add(loc.size());
    stats_.bytes_loaded_gpu_direct.fetch_add(loc.size());
    // Work the caller enqueues after the call runs after the bytes landed
    // (they have); its event marks that point on its stream.
    return gpu_.RecordOnStream(target.device, target.sync);
  }
  return last;
}

absl::Status ClientImpl::LookupAndRead(const std::vector<const std::string*>& keys,
                                       uint64_t deadline_ms, const ReadFn& read,
                                       std::vector<absl::Status>* statuses,
                                       const std::function<void()>& before_release, bool in_place,
                                       std::vector<char>* kept) {
  statuses->assign(keys.size(), absl::OkStatus());
  if (keys.empty()) return absl::OkStatus();
  // Keys to ask the master about: those the cache does not hold, and those
  // whose cached read failed for any reason.
  std::vector<size_t> ask;
  if (cache_ == nullptr) {
    ask.resize(keys.size());
    for (size_t i = 0; i < keys.size(); ++i) ask[i] = i;
  } else {
    std::vector<size_t> hits;
    std::vector<v1::ObjectLocation> cached;
    const bool large = keys.size() > kCachedShmBatchMax;
    for (size_t i = 0; i < keys.size(); ++i) {
      v1::ObjectLocation loc;
      if (cache_->Get(*keys[i], &loc, UnixMs()) && !(large && AskedCached(loc)) &&
          !(in_place && loc.size() >= kInPlaceMinBytes && SameHostDram(loc))) {
        hits.push_back(i);
        cached.push_back(std::move(loc));
      } else {
        ask.push_back(i);
      }
    }
    if (!hits.empty()) {
      Parallel(hits.size(),
               [&](size_t j) { (*statuses)[hits[j]] = read(hits[j], cached[j], true); });
    }
    uint64_t fallbacks = 0;
    for (size_t i : hits) {
      if ((*statuses)[i].ok()) continue;
      cache_->Erase(*keys[i]);
      ask.push_back(i);
      ++fallbacks;
    }
    std::sort(ask.begin(), ask.end());
    stats_.cache_hits.fetch_add(hits.size() - fallbacks);
    stats_.cache_misses.fetch_add(ask.size() - fallbacks);
    stats_.cache_fallbacks.fetch_add(fallbacks);
    metrics_.cache_hits.Increment(static_cast<double>(hits.size() - fallbacks));
    metrics_.cache_misses.Increment(static_cast<double>(ask.size() - fallbacks));
    metrics_.cache_fallbacks.Increment(static_cast<double>(fallbacks));
  }
  if (ask.empty()) {
    if (before_release) before_release();
    return absl::OkStatus();
  }
  // Taken before the lookup: a put or remove of these keys by this client
  // while it is out keeps its answer out of the cache.
  const uint64_t stamp = cache_ == nullptr ? 0 : cache_->Stamp();
  v1::LookupRequest req;
  for (size_t i : ask) req.add_keys(*keys[i]);
  req.set_client_host_id(HostId());
  req.set_store_table(true);
  v1::LookupResponse resp;
  if (absl::Status s = CoalescedLookup(req, &resp, deadline_ms); !s.ok()) return s;
  const uint64_t leased_at_unix_ms = UnixMs();
  if (resp.objects_size() != static_cast<int>(ask.size())) {
    return absl::InternalError("malformed lookup response");
  }
  Parallel(ask.size(), [&](size_t j) {
    const size_t i = ask[j];
    const v1::ObjectLocation& loc = resp.objects(static_cast<int>(j));
    (*statuses)[i] = loc.found() ? read(i, loc, false) : absl::NotFoundError("no such key");
  });
  if (cache_ != nullptr) {
    for (const v1::ObjectLocation& loc : resp.objects()) {
      if (loc.found()) {
        cache_->Put(loc, stamp);
      } else {
        cache_->Erase(loc.key());
      }
    }
    metrics_.cache_entries.Set(static_cast<double>(cache_->size()));
  }
  if (before_release) before_release();
  if (kept != nullptr) {
    std::vector<char> kept_of_resp(ask.size());
    for (size_t j = 0; j < ask.size(); ++j) kept_of_resp[j] = (*kept)[ask[j]];
    ReleaseLeases(resp, leased_at_unix_ms, &kept_of_resp);
  } else {
    ReleaseLeases(resp, leased_at_unix_ms);
  }
  return absl::OkStatus();
}

absl::Status ClientImpl::CoalescedLookup(const v1::LookupRequest& req, v1::LookupResponse* resp,
                                         uint64_t deadline_ms) {
  // Threads reading at once (an engine's workers, each with a block) send
  // one Lookup for all: the master's round trip and its CPU are paid once
  // per call out, not once per reader. The leader's deadline is the
  // earliest of every job it took (CallByDeadline).
  LookupJob job{&req, deadline_ms};
  LookupResult r = CallByDeadline(
      &lookups_, job, kBatchItemsMax,
      [](const LookupJob& j) { return static_cast<size_t>(j.request->keys_size()); },
      [this](const std::vector<const LookupJob*>& jobs, size_t begin, size_t end,
             std::vector<LookupResult>* results) {
        v1::LookupRequest merged = *jobs[begin]->request;
        for (size_t j = begin + 1; j < end; ++j) {
          for (const std::string& k : jobs[j]->request->keys()) merged.add_keys(k);
        }
        v1::LookupResponse all;
        stats_.read_lookups.fetch_add(1);
        stats_.read_lookups_joined.fetch_add(end - begin - 1);
        absl::Status s =
            CallMaster(&v1::MasterService::Stub::Lookup, merged, &all, jobs[0]->deadline_ms);
        if (s.ok()) s = InlineStores(&all);
        if (s.ok() && all.objects_size() != merged.keys_size()) {
          s = absl::InternalError("malformed lookup response");
        }
        int next = 0;
        for (size_t j = begin; j < end; ++j) {
          LookupResult& out = (*results)[j];
          if (!s.ok()) {
            // Each caller gets a status of its own, not a reference
            // to one shared rep: the rep's count is released inside
            // Debian's uninstrumented Abseil, where ThreadSanitizer
            // cannot see two threads hand it over.
            out.status = absl::Status(s.code(), s.message());
            continue;
          }
          for (int k = 0; k < jobs[j]->request->keys_size(); ++k) {
            out.response.add_objects()->Swap(all.mutable_objects(next++));
          }
        }
      });
  *resp = std::move(r.response);
  return r.status;
}

void ClientImpl::ReleaseLeases(const v1::LookupResponse& resp, uint64_t leased_at_unix_ms,
                               const std::vector<char>* kept) {
  // The master counts a lease's holders and forgets them when the lease
  // runs out; a release that arrived after that could end a later reader's
  // lease. So a lease is given back only in its first half, far from its
  // end; a later one is left to run out.
  std::vector<PendingRelease> add;
  for (int j = 0; j < resp.objects_size(); ++j) {
    if (kept != nullptr && (*kept)[j] != 0) continue;
    const v1::ObjectLocation& loc = resp.objects(j);
    const uint64_t until = loc.lease_expires_unix_ms();
    if (!loc.found() || until <= leased_at_unix_ms) continue;
    add.push_back(
        {loc.key(), loc.generation(), leased_at_unix_ms + (until - leased_at_unix_ms) / 2});
  }
  QueueReleases(std::move(add));
}

void ClientImpl::QueueReleases(std::vector<PendingRelease> add) {
  if (add.empty()) return;
  {
    MutexLock lock(&release_mu_);
    // Bounded: past it, leases simply run out.
    if (releases_.size() + add.size() > kReleaseQueueMax) return;
    for (PendingRelease& r : add) releases_.push_back(std::move(r));
  }
  release_cv_.Signal();
}

void ClientImpl::ReleaseLoop() {
  while (true) {
    std::vector<PendingRelease> batch;
    {
      MutexLock lock(&release_mu_);
      while (!release_stop_ && releases_.empty()) release_cv_.Wait(&release_mu_);
      if (release_stop_) return;
      // Gather what concurrent reads give back for a moment: one call
      // carries many keys.
      const uint64_t gather_until_ms = MonoMs() + kReleaseGatherMs;
      while (!release_stop_ && releases_.size() < kBatchItemsMax) {
        const uint64_t now_ms = MonoMs();
        if (now_ms >= gather_until_ms) break;
        release_cv_.WaitFor(&release_mu_, std::chrono::milliseconds(gather_until_ms - now_ms));
      }
      if (release_stop_) return;
      batch.swap(releases_);
    }
    const uint64_t now = UnixMs();
    v1::ReleaseLeasesRequest req;
    auto send = [&] {
      if (req.keys_size() == 0) return;
      v1::ReleaseLeasesResponse unused;
      CallMaster(&v1::MasterService::Stub::ReleaseLeases, req, &unused,
                 MonoMs() + kReleaseTimeoutMs)
          .IgnoreError();
      req.clear_keys();
      req.clear_generations();
    };
    for (const PendingRelease& r : batch) {
      if (now >= r.send_by_unix_ms) continue;
      req.add_keys(r.key);
      req.add_generations(r.generation);
      if (static_cast<size_t>(req.keys_size()) == kBatchItemsMax) send();
    }
    send();
  }
}

Status ClientImpl::GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size,
                           Deadline deadline) {
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateKey(key); !s.ok()) return FromAbsl(s);
  if (buffer == nullptr) return Status(StatusCode::kInvalidArgument, "GetInto: null buffer");
  std::vector<absl::Status> statuses;
  absl::Status s = LookupAndRead(
      {&key}, deadline_ms,
      [&](size_t, const v1::ObjectLocation& loc, bool cached) {
        if (size != nullptr) *size = loc.size();
        return ReadToTarget(loc, ReadTarget{static_cast<char*>(buffer), capacity}, deadline_ms,
                            cached);
      },
      &statuses);
  return FromAbsl(s.ok() ? statuses[0] : s);
}

Status ClientImpl::Get(const std::string& key, std::string* out, Deadline deadline) {
  uint64_t start_us = MonoUs();
  auto run = [&]() -> Status {
    if (out == nullptr) return Status(StatusCode::kInvalidArgument, "Get: null out");
    std::vector<std::string> values;
    std::vector<Status> statuses;
    Status s = BatchGet({key}, &values, &statuses, deadline);
    if (!s.ok()) return s;
    if (statuses[0].ok()) *out = std::move(values[0]);
    return statuses[0];
  };
  Status s = run();
  RecordOp(Op::kGet, s, start_us);
  return s;
}

Status ClientImpl::BatchGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                            std::vector<Status>* statuses, Deadline deadline) {
  return BatchGetAtMost(keys, 0, values, statuses, deadline);
}

Status ClientImpl::BatchGetAtMost(const std::vector<std::string>& keys, uint64_t bytes_max,
                                  std::vector<std::string>* values, std::vector<Status>* statuses,
                                  Deadline deadline) {
  if (values == nullptr || statuses == nullptr) {
    return Status(StatusCode::kInvalidArgument, "BatchGet: null values or statuses");
  }
  statuses->clear();  // empty unless the batch as a whole succeeds
  uint64_t deadline_ms = 0;
  if (absl::Status s = Begin(deadline, &deadline_ms); !s.ok()) return FromAbsl(s);
  if (absl::Status s = ValidateBatchSize(keys.size(), "keys"); !s.ok()) return FromAbsl(s);
  for (const std::string& k : keys) {
    if (absl::Status s = ValidateKey(k); !s.ok()) return FromAbsl(s);
  }
  std::vector<const std::string*> key_ptrs;
  key_ptrs.reserve(keys.size());
  for (const std::string& k : keys) key_ptrs.push_back(&k);
  // Strings of a vector the caller reuses keep their memory: a block of the
  // same size as last time needs no allocation and no zero-fill.
  values->resize(keys.size());
  // With a bound: the bytes each item holds a claim to, and all of them.
  // An item is read again from the master's answer when its cached read
  // failed (never at the same time), so it tops its claim up.
  std::vector<uint64_t> claimed(bytes_max != 0 ? keys.size() : 0);
  std::atomic<uint64_t> held{0};
  std::vector<absl::Status> results;
  absl::Status s = LookupAndRead(
      key_ptrs, deadline_ms,
      [&](size_t i, const v1::ObjectLocation& loc, bool cached) {
        if (bytes_max != 0 && loc.size() > claimed[i]) {
          const uint64_t more = loc.size() - claimed[i];
          if (held.fetch_add(more) + more > bytes_max) {
            held.fetch_sub(more);
            return absl::ResourceExhaustedError(
                absl::StrCat("the batch's values are over its bound of ", bytes_max, " bytes"));
          }
          claimed[i] = loc.size();
        }
        std::string& v = (*values)[i];
        v.resize(loc.size());
        return ReadObject(loc, v.data(), deadline_ms, cached);
      },
      &results);
  if (!s.ok()) {
    values->clear();
    return FromAbsl(s);
  }
  statuses->clear();
  for (size_t i = 0; i < results.size(); ++i) {
    if (!results[i].ok()) (*values)[i].clear();
    statuses->push_back(FromAbsl(results[i]));
  }
  return Status::Ok();
}

}  // namespace shelf
