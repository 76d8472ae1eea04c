// TcpDataClient: the client side of the TCP data plane.
//
// Keeps a pool of authenticated, persistent connections per store address;
// each operation borrows one, so concurrent operations to one store run on
// parallel connections. Payloads move straight between the socket and the
// caller's memory. Each call takes an absolute deadline (MonoMs clock): the
// socket timeouts are set from it, so no call blocks past it.
//
// Thread-safe.
#ifndef SHELF_TRANSPORT_TCP_CLIENT_H_
#define SHELF_TRANSPORT_TCP_CLIENT_H_

#include <sys/uio.h>

#include <cstdint>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/functional/function_ref.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/mutex.h"
#include "common/net.h"
#include "transport/data_tls.h"
#include "transport/session.h"
#include "transport/wire.h"

namespace shelf::transport {

class TcpDataClient {
 public:
  struct Options {
    std::string secret;  // cluster secret; empty for an open cluster
    uint64_t connect_timeout_ms = 2000;
    size_t max_idle_per_peer = 32;  // idle connections kept per store
    // TLS 1.3 to the stores (their --data-tls); tls_files.ca must sign the
    // stores' certificates, which must name the host dialled.
    bool tls = false;
    wire::DataTls::Files tls_files;
    // Ask every store for session tags over payloads too (a store run with
    // --session-tag-payload has them anyway); a store that does not agree
    // is not used.
    bool session_tag_payload = false;
  };
  explicit TcpDataClient(Options options);
  ~TcpDataClient();
  TcpDataClient(const TcpDataClient&) = delete;
  TcpDataClient& operator=(const TcpDataClient&) = delete;

  // Reads [offset, offset+length) of a DRAM segment into dst, under
  // `read_credential` (a read grant, then the key: wire::ReadGrant; empty:
  // none, which a store with read grants on refuses).
  absl::Status Read(const std::string& address, uint32_t segment_id, uint64_t offset,
                    uint64_t length, char* dst, uint64_t deadline_ms,
                    absl::string_view read_credential = {});
  // Writes src into [offset, offset+length) under `grant`.
  absl::Status Write(const std::string& address, const wire::Grant& grant, uint32_t segment_id,
                     uint64_t offset, const char* src, uint64_t length, uint64_t deadline_ms);
  // Pipelined forms: every request goes out on one connection before the
  // answers are read, so a run of small blocks pays one round trip, not
  // one each. One status per request.
  struct ReadRequest {
    uint32_t segment_id = 0;
    uint64_t offset = 0;
    uint64_t length = 0;
    char* dst = nullptr;
    absl::string_view read_credential;  // as Read's
  };
  void ReadMany(const std::string& address, absl::Span<const ReadRequest> reads,
                uint64_t deadline_ms, std::vector<absl::Status>* statuses);
  struct WriteRequest {
    const wire::Grant* grant = nullptr;
    uint32_t segment_id = 0;
    uint64_t offset = 0;
    const char* src = nullptr;
    uint64_t length = 0;
  };
  // A write the store refuses closes the connection; the writes after it
  // are then sent again one at a time, so each gets its own status.
  void WriteMany(const std::string& address, absl::Span<const WriteRequest> writes,
                 uint64_t deadline_ms, std::vector<absl::Status>* statuses);
  // Reads a committed block of exactly `length` bytes by key into dst (the
  // store's DRAM record first, then its SSD tier). `generation` non-zero:
  // FAILED_PRECONDITION when the store's DRAM record of the key has
  // another (the key was replaced). NOT_FOUND when the store has neither.
  // `read_grant`: the replica's 60-byte read grant (empty: none).
  absl::Status ReadKey(const std::string& address, absl::string_view key, uint64_t length,
                       char* dst, uint64_t deadline_ms, uint64_t generation = 0,
                       absl::string_view read_grant = {});
  // OK iff the store's DRAM record of `key` is of `length` bytes and (when
  // non-zero) `generation`, and, with `at`, at that range; no bytes move.
  // Errors as ReadKey's; another range is FAILED_PRECONDITION.
  absl::Status CheckKey(const std::string& address, absl::string_view key, uint64_t length,
                        uint64_t generation, uint64_t deadline_ms,
                        absl::string_view read_grant = {},
                        std::optional<wire::KeyRange> at = std::nullopt);
  // CheckKey, running `meanwhile` while the store answers: the request is
  // sent, `meanwhile` runs, then the answer is read, so the round trip
  // overlaps the caller's work. `meanwhile` runs exactly once whatever
  // becomes of the check (also when the store cannot be reached).
  absl::Status CheckKeyWhile(const std::string& address, absl::string_view key, uint64_t length,
                             uint64_t generation, uint64_t deadline_ms,
                             absl::string_view read_grant, absl::FunctionRef<void()> meanwhile,
                             std::optional<wire::KeyRange> at = std::nullopt);
  // Round trip on one connection (connects and authenticates if needed).
  absl::Status Ping(const std::string& address, uint64_t deadline_ms);
  // Drops every pooled connection to `address` (e.g. after a store died).
  void Forget(const std::string& address);

  // A new authenticated connection to `address`, outside the pool; the
  // caller owns (and closes) the descriptor. For the RDMA backend's control
  // channel, whose queue pair on the store lives as long as the connection.
  absl::StatusOr<int> Dial(const std::string& address, uint64_t deadline_ms);
  // RDMA_CONNECT on `fd` (from Dial): sends this end's RDMA connection info
  // for `segment_id`, with `credential` (a read credential for the
  // segment, or empty), returns the store's. FAILED_PRECONDITION when the
  // store offers no RDMA; PERMISSION_DENIED when a store of tenant arenas
  // refused the credential; UNAVAILABLE when the connection fails.
  absl::StatusOr<std::string> RdmaConnect(int fd, uint32_t segment_id, absl::string_view local_info,
                                          absl::string_view credential, uint64_t deadline_ms);
  // RDMA_PULL on `fd` (after RdmaConnect): asks the store to READ `length`
  // bytes from `source` into [offset, +length) of `segment_id` under
  // `grant` (wire::EncodeGrant bytes), and waits for its answer: OK once
  // the bytes are in the segment; the store's code when it refused the
  // grant or its device failed; UNAVAILABLE when the connection fails.
  absl::Status RdmaPull(int fd, uint32_t segment_id, uint64_t offset, uint64_t length,
                        const wire::RdmaSource& source, absl::string_view grant,
                        uint64_t deadline_ms);

 private:
  // READ_KEY; dst null: the check-only form (`at`: of that range too).
  // `meanwhile` runs once, after the request is sent (or when it cannot
  // be) and before the answer is read.
  absl::Status KeyOp(const std::string& address, absl::string_view key, uint64_t length,
                     uint64_t generation, char* dst, uint64_t deadline_ms,
                     absl::string_view read_grant, absl::FunctionRef<void()> meanwhile,
                     const wire::KeyRange* at = nullptr);
  // A connection to `address`: an idle one, or a new one. With `reused`,
  // an idle one is taken without asking the socket whether the store
  // closed it meanwhile (one system call less per call): *reused says so,
  // and a caller whose request then finds the connection closed before any
  // answer retries once on a new one (Retry). Without, an idle connection
  // that reads (EOF) or failed is closed and skipped.
  // One attempt of KeyOp, of Read: on a connection taken idle without a
  // check when `reused` is given.
  absl::Status KeyOpOnce(const std::string& address, absl::string_view key, uint64_t length,
                         uint64_t generation, char* dst, uint64_t deadline_ms,
                         absl::string_view read_grant, absl::FunctionRef<void()> meanwhile,
                         const wire::KeyRange* at, bool* reused, bool* answered);
  absl::Status ReadOnce(const std::string& address, uint32_t segment_id, uint64_t offset,
                        uint64_t length, char* dst, uint64_t deadline_ms,
                        absl::string_view read_credential, bool* reused, bool* answered);
  absl::StatusOr<int> Acquire(const std::string& address, uint64_t deadline_ms,
                              bool* reused = nullptr);
  // Whether a request that failed with `s` on a connection taken idle
  // (`reused`) goes again on a new one: the store closed the idle
  // connection (restarted, or its idle timeout) before it answered.
  static bool Retry(bool reused, bool answered, const absl::Status& s);
  void Release(const std::string& address, int fd, bool reusable);
  absl::Status Connect(const std::string& address, uint64_t deadline_ms, int* fd);
  // One connection attempt of Connect: TCP, TLS, the handshake.
  absl::Status Dial1(const HostPort& hp, uint64_t deadline_ms, int* fd);
  // Sends a request, reads the response header and its error text. On OK the
  // caller reads `response->length` payload bytes.
  absl::Status Exchange(int fd, const wire::Header& request, struct iovec* extra_and_payload,
                        int iovcnt, wire::Header* response, bool* answered = nullptr);
  // For the pipelined calls: a connection to `address` with its timeouts set
  // from the deadline, and `n` requests with fresh ids. On failure every
  // status gets it.
  absl::StatusOr<int> StartPipeline(const std::string& address, size_t n, uint64_t deadline_ms,
                                    std::vector<wire::Header>* requests,
                                    std::vector<absl::Status>* statuses);
  // Reads the response to `request`: its header and error text.
  // On OK with a payload: the caller reads it with ReadBody.
  // `answered`, if given, is set once the response's header has arrived.
  absl::Status Receive(int fd, const wire::Header& request, wire::Header* response,
                       bool* answered = nullptr);
  // Reads a response's payload and checks its tag.
  absl::Status ReadBody(int fd, char* dst, uint64_t length);
  // The session of a descriptor from Connect (tags of both directions).
  wire::Session* SessionOf(int fd) ABSL_LOCKS_EXCLUDED(mu_);
  // Sets fd's send and receive timeouts to `left_ms` (> 0), unless they
  // are set already to at most an eighth above it: a blocking call then
  // waits at most that much past the deadline, and calls that each bring a
  // fresh deadline of the same length cost no setsockopt (it was four
  // system calls per call).
  void ArmTimeout(int fd, uint64_t left_ms);
  static constexpr uint64_t kTimeoutSlackDivisor = 8;
  // Drops fd's session and closes it.
  void Close(int fd) ABSL_LOCKS_EXCLUDED(mu_);

  const Options options_;
  // With options_.tls: the context, or why there is none (every connect
  // then fails with it).
  absl::StatusOr<std::shared_ptr<wire::DataTls>> tls_;
  Mutex mu_;
  std::map<std::string, std::vector<int>> idle_ ABSL_GUARDED_BY(mu_);
  uint64_t next_request_id_ ABSL_GUARDED_BY(mu_) = 1;
  // Every descriptor's session, pooled or borrowed (a borrowed one's is
  // used without the lock: one operation owns it). Dial's descriptors are
  // closed by their owner: their number's entry is replaced when reused.
  std::map<int, std::unique_ptr<wire::Session>> sessions_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::transport

#endif  // SHELF_TRANSPORT_TCP_CLIENT_H_
