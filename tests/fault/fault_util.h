// Helpers shared by the fault and security tests: deterministic block bytes,
// shell commands, a raw control-plane probe that snapshots what the master
// holds, and a network namespace joined to the test's own namespace by a
// veth pair (for partitions).
//
//   FaultProbe probe(cluster->master_address(), secret);
//   absl::StatusOr<ClusterSnapshot> before = probe.Snapshot();
//   ... hostile input ...
//   EXPECT_EQ(before->ToString(), probe.Snapshot()->ToString());
//
//   auto ns = NetNs::Create();         // needs root; skip the test without it
//   (*ns)->SetLink(false);             // the partition
//
// Not thread-safe unless stated.
#ifndef SHELF_TESTS_FAULT_FAULT_UTIL_H_
#define SHELF_TESTS_FAULT_FAULT_UTIL_H_

#include <time.h>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "testing/wait_for.h"

namespace shelf::fault {

// `n` bytes that depend only on `seed`: a reader checks a block against the
// writer's bytes without keeping them. Thread-safe.
std::string BlockBytes(size_t n, uint64_t seed);

// True when the process may create namespaces and mount file systems.
bool IsRoot();

// Runs `command` with /bin/sh; returns its exit status (-1 if it could not
// run) and, if `output` is not null, its stdout and stderr.
int RunShell(const std::string& command, std::string* output = nullptr);

// Quotes one argument for /bin/sh.
std::string ShellQuote(const std::string& arg);

// With openssl: in `dir`, NAME-ca.pem (a CA) and NAME.pem / NAME.key (mode
// 0600), a certificate for 127.0.0.1 and localhost signed by that CA, fit
// to serve and to present as a client certificate.
absl::Status MakeTestCertificates(const std::string& dir, const std::string& name);
// With openssl, after MakeTestCertificates(dir, ca_name): CN.pem / CN.key, a
// client certificate whose common name and DNS subjectAltName are `cn`,
// signed by ca_name-ca.pem.
absl::Status MakeClientCertificate(const std::string& dir, const std::string& ca_name,
                                   const std::string& cn);

// What the master holds, from AdminService.Status and Segments: enough to
// prove that a rejected request changed nothing.
struct ClusterSnapshot {
  uint64_t objects = 0;
  uint64_t puts_in_flight = 0;
  uint64_t dram_used_bytes = 0;
  uint64_t ssd_used_bytes = 0;
  int live_nodes = 0;
  // "node_id state dram_used objects" per node, then
  // "node_id seg used free_extents" per segment, sorted.
  std::vector<std::string> details;
  std::string ToString() const;
};

// Raw gRPC access to the master with the cluster token (or none).
class FaultProbe {
 public:
  // `secret` empty: calls carry no token. `tls_ca` empty: plaintext.
  FaultProbe(const std::string& master, const std::string& secret, const std::string& tls_ca = "");
  v1::MasterService::Stub* master() { return master_.get(); }
  v1::AdminService::Stub* admin() { return admin_.get(); }
  const std::string& token() const { return token_; }
  // A context with the token and a deadline of `timeout_ms`.
  std::unique_ptr<grpc::ClientContext> Context(uint64_t timeout_ms = 5000) const;

  absl::StatusOr<v1::StatusResponse> Status();
  absl::StatusOr<ClusterSnapshot> Snapshot();
  // Lookup without a lease; `found` per key.
  absl::StatusOr<std::vector<bool>> Found(const std::vector<std::string>& keys);
  // Waits until `pred(status)` holds; returns the last error or
  // DEADLINE_EXCEEDED.
  template <typename Pred>
  absl::Status WaitFor(Pred pred, uint64_t timeout_ms);

 private:
  std::shared_ptr<grpc::Channel> channel_;
  std::unique_ptr<v1::MasterService::Stub> master_;
  std::unique_ptr<v1::AdminService::Stub> admin_;
  std::string token_;
};

// A network namespace with one veth pair: `root_if` (address `root_ip`) in
// the caller's namespace, `ns_if` (address `ns_ip`) inside. Names and the
// /30 subnet derive from the pid, so parallel tests do not collide. The
// destructor deletes the namespace and the pair.
class NetNs {
 public:
  // FAILED_PRECONDITION without root or without the `ip` tool.
  static absl::StatusOr<std::unique_ptr<NetNs>> Create();
  ~NetNs();
  NetNs(const NetNs&) = delete;
  NetNs& operator=(const NetNs&) = delete;

  const std::string& name() const { return name_; }
  const std::string& root_ip() const { return root_ip_; }
  const std::string& ns_ip() const { return ns_ip_; }
  // Brings the link up or down (both ends lose carrier when down).
  absl::Status SetLink(bool up);
  // argv that runs `argv` inside the namespace.
  std::vector<std::string> Wrap(const std::vector<std::string>& argv) const;

 private:
  NetNs() = default;
  std::string ip_;
  std::string name_, root_if_, ns_if_, root_ip_, ns_ip_;
};

// Path of the `ip` tool, or empty.
std::string FindIpTool();

// ---------------------------------------------------------------- impl

template <typename Pred>
absl::Status FaultProbe::WaitFor(Pred pred, uint64_t timeout_ms) {
  absl::Status last = absl::DeadlineExceededError("condition not reached");
  bool held = shelf::WaitFor(
      [&] {
        absl::StatusOr<v1::StatusResponse> st = Status();
        if (!st.ok()) last = st.status();
        return st.ok() && pred(*st);
      },
      timeout_ms, 50);
  return held ? absl::OkStatus() : last;
}

}  // namespace shelf::fault

#endif  // SHELF_TESTS_FAULT_FAULT_UTIL_H_
