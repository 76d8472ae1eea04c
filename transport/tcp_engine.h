// TcpEngine: the TCP backend of transport::Engine, over TcpDataClient's
// pooled, authenticated connections (frames in docs/wire.md).
//
// Large ops are striped: an op of at least 2 * stripe_bytes_min bytes is cut
// into up to `streams_per_op` contiguous stripes, each moved on its own
// pooled connection in parallel (a write's stripes all carry the put's
// grant, which covers each of them). Smaller ops to one store are gathered,
// in order and per direction, into runs of at least stripe_bytes_min moved
// pipelined on one connection (every request sent before the answers are
// read). Each stripe and run is a task on the engine's threads; a batch that
// makes a single task runs it in the submitting thread.
//
//   transport::TcpEngine::Options options;
//   options.secret = secret;
//   transport::TcpEngine tcp(options);
//   tcp.Execute(ops, MonoMs() + 1000);
//   tcp.client().ReadKey(address, key, size, dst, deadline_ms);  // SSD tier
//
// Thread-safe.
#ifndef SHELF_TRANSPORT_TCP_ENGINE_H_
#define SHELF_TRANSPORT_TCP_ENGINE_H_

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "common/thread_pool.h"
#include "transport/engine.h"
#include "transport/tcp_client.h"

namespace shelf::transport {

class TcpEngine final : public Engine {
 public:
  struct Options {
    std::string secret;  // cluster secret; empty for an open cluster
    uint64_t connect_timeout_ms = 2000;
    size_t max_idle_per_peer = 32;
    size_t threads = 16;                     // transfer threads
    size_t streams_per_op = 4;               // 1: never stripe
    uint64_t stripe_bytes_min = 2ull << 20;  // no stripe is smaller
    // TLS 1.3 to the stores (TcpDataClient::Options::tls).
    bool tls = false;
    wire::DataTls::Files tls_files;
    bool session_tag_payload = false;  // TcpDataClient::Options::session_tag_payload
  };
  explicit TcpEngine(Options options);
  ~TcpEngine() override;

  Kind kind() const override { return Kind::kTcp; }
  bool Reaches(const Peer& peer) const override { return !peer.route(Kind::kTcp).empty(); }

  // The connection pool, for what is not a segment transfer: SSD-tier reads
  // by key, pings, dropping a dead store's connections.
  TcpDataClient& client() { return client_; }

  // How many stripes an op of `length` bytes is cut into.
  size_t StripesFor(uint64_t length) const;

 private:
  void Start(std::shared_ptr<Batch> batch, std::vector<Work> work, uint64_t deadline_ms) override;
  // Moves [begin, begin + length) of one op, relative to its start.
  absl::Status Move(const Work& w, uint64_t begin, uint64_t length, uint64_t deadline_ms);
  // Moves n whole ops, all reads or all writes to one store, pipelined on
  // one connection, and completes each in `batch`.
  void MoveRun(size_t n, const std::function<const Work*(size_t)>& item, uint64_t deadline_ms,
               Batch* batch);

  const Options options_;
  TcpDataClient client_;
  std::unique_ptr<ThreadPool> pool_;  // last: joined first
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_TCP_ENGINE_H_
