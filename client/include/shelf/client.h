// libshelf: the client SDK that inference engines link.
//
// A Client talks to the master over gRPC for metadata (where a block lives,
// where to write one) and moves block bytes straight between the caller's
// memory and the stores: shared memory when the store is on this host, else
// the TCP data plane. Every read is checked against the writer's checksum;
// wrong bytes are never returned as a hit.
//
//   shelf::ClientOptions opts;
//   opts.masters = {"127.0.0.1:7000"};
//   std::unique_ptr<shelf::Client> client;
//   shelf::Status s = shelf::Client::Open(opts, &client);
//   s = client->Put("block-0", data, size);
//   std::string bytes;
//   s = client->Get("block-0", &bytes);          // NOT_FOUND on a miss
//
// Thread-safe: one Client may be shared by all of an engine's threads.
// Errors (shelf::Status codes), common to every method:
//   INVALID_ARGUMENT   empty key, key over 256 bytes, size 0, batch over 1024
//   DEADLINE_EXCEEDED  the call's deadline passed (timeout_ms, or the default)
//   UNAVAILABLE        no master or no replica could be reached
//   UNAUTHENTICATED    the cluster needs a secret this client lacks
//   FAILED_PRECONDITION the client was closed
#ifndef SHELF_CLIENT_CLIENT_H_
#define SHELF_CLIENT_CLIENT_H_

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "shelf/status.h"

namespace shelf {

struct ClientOptions {
  std::vector<std::string> masters;  // "HOST:PORT" of the master(s)
  std::string secret;                // cluster secret; empty for an open cluster
  uint64_t timeout_ms = 5000;        // default deadline of each call
  bool allow_tcp = true;             // transports this client may use
  bool allow_shm = true;
  bool verify_checksums = true;      // check every block read against its checksum
  std::string tls_ca;                // PEM file: use TLS to the master
};

struct PutOptions {
  uint32_t replicas = 1;        // stores that get a copy, on distinct nodes
  bool best_effort = false;     // accept fewer replicas than asked
  bool prefer_local = false;    // put a replica on this host when possible
  std::string spread_label;     // e.g. "zone": replicas on distinct label values
  uint64_t timeout_ms = 0;      // 0: the client's default
};

// One block of a batch put. `data` must stay valid until the call returns.
struct PutItem {
  std::string key;
  const void* data = nullptr;
  size_t size = 0;
};

// Transfer counters, for reports and metrics.
struct ClientStats {
  uint64_t bytes_stored = 0;      // written to stores (all replicas)
  uint64_t bytes_loaded = 0;      // read from stores
  uint64_t bytes_loaded_shm = 0;  // of which through shared memory
  uint64_t bytes_loaded_tcp = 0;
  uint64_t bytes_loaded_ssd = 0;  // of which served from an SSD tier
  uint64_t blocks_loaded_dram = 0;
  uint64_t blocks_loaded_ssd = 0;
  uint64_t checksum_mismatches = 0;
  uint64_t replica_failovers = 0;  // reads that moved on to another replica
};

class Client {
 public:
  // Connects to the master. INVALID_ARGUMENT for no masters.
  static Status Open(const ClientOptions& options, std::unique_ptr<Client>* out);
  virtual ~Client() = default;

  // Stores a block. OK also when the key already exists (content keys make
  // the write unnecessary). RESOURCE_EXHAUSTED when the cluster has no room
  // it can evict.
  virtual Status Put(const std::string& key, const void* data, size_t size,
                     const PutOptions& options = PutOptions()) = 0;
  // Reads a block into `out` (resized). NOT_FOUND on a miss; DATA_LOSS when
  // every replica failed its checksum.
  virtual Status Get(const std::string& key, std::string* out, uint64_t timeout_ms = 0) = 0;
  // Reads a block into caller memory of `capacity` bytes; `size` gets the
  // block size. OUT_OF_RANGE (nothing read) if the block is larger.
  virtual Status GetInto(const std::string& key, void* buffer, size_t capacity, size_t* size,
                         uint64_t timeout_ms = 0) = 0;
  // Batches: one master round trip for the metadata; per-item statuses in
  // `statuses` (same order). The call's own status is not OK only when the
  // whole batch failed (e.g. master unreachable, batch too large).
  virtual Status BatchPut(const std::vector<PutItem>& items, std::vector<Status>* statuses,
                          const PutOptions& options = PutOptions()) = 0;
  virtual Status BatchGet(const std::vector<std::string>& keys, std::vector<std::string>* values,
                          std::vector<Status>* statuses, uint64_t timeout_ms = 0) = 0;
  // Which keys are present (no lease taken).
  virtual Status Exists(const std::vector<std::string>& keys, std::vector<bool>* present,
                        uint64_t timeout_ms = 0) = 0;
  // Removes a key. NOT_FOUND if absent; FAILED_PRECONDITION if pinned.
  virtual Status Remove(const std::string& key, uint64_t timeout_ms = 0) = 0;
  // Length of the longest run of leading keys present: the number of
  // prefix blocks already computed. Takes read leases on them.
  virtual Status MatchPrefix(const std::vector<std::string>& keys, size_t* matched,
                             uint64_t timeout_ms = 0) = 0;

  virtual ClientStats stats() const = 0;
  // Ends the client: later calls answer FAILED_PRECONDITION.
  virtual void Close() = 0;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_CLIENT_H_
