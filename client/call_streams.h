// CallStreams: a client's hot master calls (PutStart, BatchPutStart,
// PutCommit, Lookup) on long-lived MasterService.Calls streams.
//
//   CallStreams streams(4, token);
//   bool sent = false;
//   absl::Status s = streams.Call(address, stub, &request, &response,
//                                 deadline_ms, &sent);
//   if (!sent) { ...make the call unary... }
//
// A call on a stream that is open already skips what a unary call pays
// each time (a call object, its headers and metadata, the server's thread
// hand-off): on one 2-core host, about half the round trip and the CPU
// (docs/master.md, "Call streams"). Each stream carries one call at a
// time; a client keeps up to `streams_max` per master address, opened on
// demand, and closes one left idle for kIdleCloseMs. A call that finds
// every stream busy, or a master that refuses streams (one past its
// --max-call-streams, or one without the method), is not sent (`*sent`
// false): its caller makes it unary, and after a refusal every call to
// that master does for kRefusedBackoffMs.
//
// A call's deadline holds on a stream as on a unary call: a watchdog
// thread cancels the stream of a call still unanswered at its deadline,
// and the call ends DEADLINE_EXCEEDED. A stream that breaks (the master
// went away, or a cancel) is dropped; the call on it ends UNAVAILABLE
// (sent: the master may have run it, as a unary call cut off may have).
//
// Thread-safe.
#ifndef SHELF_CLIENT_CALL_STREAMS_H_
#define SHELF_CLIENT_CALL_STREAMS_H_

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "common/mutex.h"
#include "proto/shelf.grpc.pb.h"

namespace shelf {

class CallStreams {
 public:
  static constexpr uint64_t kIdleCloseMs = 10000;
  static constexpr uint64_t kRefusedBackoffMs = 30000;

  // `streams_max`: streams open at once per master address (0: none; every
  // call is then not sent). `token`: the metadata each stream opens with.
  CallStreams(size_t streams_max, std::string token);
  // Ends every stream (calls in progress on one end UNAVAILABLE).
  ~CallStreams();
  CallStreams(const CallStreams&) = delete;
  CallStreams& operator=(const CallStreams&) = delete;

  // Makes `request` (its id set here) on a stream to the master at
  // `address`, through `stub`, which reaches that address. The call's
  // status as its unary method would end it, with `response` filled when
  // OK; `*sent` false, and nothing sent, when no stream took it.
  absl::Status Call(const std::string& address, v1::MasterService::Stub* stub,
                    v1::StreamedCallRequest* request, v1::StreamedCallResponse* response,
                    uint64_t deadline_ms, bool* sent) ABSL_LOCKS_EXCLUDED(mu_);

  // Calls answered on streams, and streams open now.
  uint64_t calls() const;
  size_t open_streams() ABSL_LOCKS_EXCLUDED(mu_);

 private:
  struct Stream {
    grpc::ClientContext context;
    std::unique_ptr<grpc::ClientReaderWriter<v1::StreamedCallRequest, v1::StreamedCallResponse>> rw;
    std::string address;
    uint64_t deadline_ms = 0;  // of the call on it; 0: none
    uint64_t idle_since_ms = 0;
    bool answered_once = false;  // the master took the stream
  };
  struct Pool {
    std::vector<std::unique_ptr<Stream>> idle;
    size_t open = 0;  // idle and in use
    uint64_t refused_until_ms = 0;
  };

  // Cancels streams whose call is past its deadline; closes idle ones.
  void Watch() ABSL_LOCKS_EXCLUDED(mu_);
  // Ends `stream` (cancelled or broken, or idle) and forgets it.
  void Drop(std::unique_ptr<Stream> stream) ABSL_LOCKS_EXCLUDED(mu_);

  const size_t streams_max_;
  const std::string token_;
  std::atomic<uint64_t> calls_{0};
  uint64_t next_id_ ABSL_GUARDED_BY(mu_) = 1;
  Mutex mu_;
  CondVar changed_;  // a call began or ended, or stopping_
  absl::flat_hash_map<std::string, Pool> pools_ ABSL_GUARDED_BY(mu_);
  std::vector<Stream*> busy_ ABSL_GUARDED_BY(mu_);  // with a call on them
  bool stopping_ ABSL_GUARDED_BY(mu_) = false;
  std::thread watchdog_;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_CALL_STREAMS_H_
