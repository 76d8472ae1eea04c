#include "tests/fault/fault_util.h"

#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <random>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace shelf::fault {

std::string BlockBytes(size_t n, uint64_t seed) {
  std::string s(n, '\0');
  std::mt19937_64 rng(seed * 0x9E3779B97F4A7C15ull + 1);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  for (; i < n; ++i) s[i] = static_cast<char>(rng());
  return s;
}

bool IsRoot() { return geteuid() == 0; }

std::string ShellQuote(const std::string& arg) {
  std::string q = "'";
  for (char c : arg) q += c == '\'' ? std::string("'\\''") : std::string(1, c);
  return q + "'";
}

// A CA, and a certificate for 127.0.0.1 / localhost signed by it that serves
// as the master's server certificate and as every caller's client one.
absl::Status MakeTestCertificates(const std::string& dir, const std::string& name) {
  std::string d = ShellQuote(dir);
  std::ofstream(dir + "/san.ext") << "subjectAltName=IP:127.0.0.1,DNS:localhost\n";
  const std::string ec = "-newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes ";
  const std::vector<std::string> steps = {
      absl::StrCat("openssl req -x509 ", ec, "-days 1 -subj /CN=", name, "-ca -keyout ", d, "/",
                   name, "-ca.key -out ", d, "/", name, "-ca.pem"),
      absl::StrCat("openssl req ", ec, "-subj /CN=localhost -keyout ", d, "/", name, ".key -out ",
                   d, "/", name, ".csr"),
      absl::StrCat("openssl x509 -req -days 1 -in ", d, "/", name, ".csr -CA ", d, "/", name,
                   "-ca.pem -CAkey ", d, "/", name, "-ca.key -CAcreateserial -out ", d, "/", name,
                   ".pem -extfile ", d, "/san.ext"),
      absl::StrCat("chmod 600 ", d, "/", name, ".key"),
  };
  for (const std::string& step : steps) {
    std::string out;
    if (RunShell(step, &out) != 0) {
      return absl::InternalError(absl::StrCat("'", step, "' failed: ", out));
    }
  }
  return absl::OkStatus();
}

absl::Status MakeClientCertificate(const std::string& dir, const std::string& ca_name,
                                   const std::string& cn) {
  std::string d = ShellQuote(dir);
  std::ofstream(dir + "/" + cn + ".ext") << "subjectAltName=DNS:" << cn << "\n";
  const std::vector<std::string> steps = {
      absl::StrCat("openssl req -newkey ec -pkeyopt ec_paramgen_curve:prime256v1 -nodes -subj /CN=",
                   cn, " -keyout ", d, "/", cn, ".key -out ", d, "/", cn, ".csr"),
      absl::StrCat("openssl x509 -req -days 1 -in ", d, "/", cn, ".csr -CA ", d, "/", ca_name,
                   "-ca.pem -CAkey ", d, "/", ca_name, "-ca.key -CAcreateserial -out ", d, "/", cn,
                   ".pem -extfile ", d, "/", cn, ".ext"),
      absl::StrCat("chmod 600 ", d, "/", cn, ".key"),
  };
  for (const std::string& step : steps) {
    std::string out;
    if (RunShell(step, &out) != 0) {
      return absl::InternalError(absl::StrCat("'", step, "' failed: ", out));
    }
  }
  return absl::OkStatus();
}

int RunShell(const std::string& command, std::string* output) {
  FILE* p = popen((command + " 2>&1").c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 4096> buf;
  std::string out;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) out.append(buf.data(), n);
  int status = pclose(p);
  if (output != nullptr) *output = out;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

std::string ClusterSnapshot::ToString() const {
  return absl::StrCat("objects=", objects, " puts_in_flight=", puts_in_flight,
                      " dram_used=", dram_used_bytes, " ssd_used=", ssd_used_bytes,
                      " live=", live_nodes, " [", absl::StrJoin(details, "; "), "]");
}

FaultProbe::FaultProbe(const std::string& master, const std::string& secret,
                       const std::string& tls_ca) {
  TlsFiles tls;
  tls.ca = tls_ca;
  absl::StatusOr<std::shared_ptr<grpc::Channel>> ch = MakeChannel(master, tls);
  if (ch.ok()) channel_ = *ch;
  master_ = v1::MasterService::NewStub(channel_);
  admin_ = v1::AdminService::NewStub(channel_);
  token_ = AuthToken(secret);
}

std::unique_ptr<grpc::ClientContext> FaultProbe::Context(uint64_t timeout_ms) const {
  auto ctx = std::make_unique<grpc::ClientContext>();
  PrepareContext(ctx.get(), token_, timeout_ms);
  return ctx;
}

absl::StatusOr<v1::StatusResponse> FaultProbe::Status() {
  v1::StatusResponse resp;
  absl::Status s = FromGrpc(admin_->Status(Context().get(), v1::StatusRequest(), &resp));
  if (!s.ok()) return s;
  return resp;
}

absl::StatusOr<ClusterSnapshot> FaultProbe::Snapshot() {
  absl::StatusOr<v1::StatusResponse> st = Status();
  if (!st.ok()) return st.status();
  v1::SegmentsResponse segs;
  absl::Status s = FromGrpc(admin_->Segments(Context().get(), v1::SegmentsRequest(), &segs));
  if (!s.ok()) return s;
  ClusterSnapshot snap;
  snap.objects = st->objects();
  snap.puts_in_flight = st->puts_in_flight();
  snap.dram_used_bytes = st->dram_used_bytes();
  snap.ssd_used_bytes = st->ssd_used_bytes();
  for (const v1::NodeStatus& n : st->nodes()) {
    snap.live_nodes += n.state() == v1::NODE_LIVE;
    snap.details.push_back(absl::StrCat(n.node_id(), " state=", n.state(), " dram_used=",
                                        n.dram_used_bytes(), " objects=", n.objects()));
  }
  for (const v1::SegmentStatus& g : segs.segments()) {
    snap.details.push_back(absl::StrCat(g.node_id(), " seg=", g.segment_id(), " tier=", g.tier(),
                                        " used=", g.used_bytes(), " extents=", g.free_extents()));
  }
  std::sort(snap.details.begin(), snap.details.end());
  return snap;
}

absl::StatusOr<std::vector<bool>> FaultProbe::Found(const std::vector<std::string>& keys) {
  v1::LookupRequest req;
  for (const std::string& k : keys) req.add_keys(k);
  req.set_no_lease(true);
  v1::LookupResponse resp;
  absl::Status s = FromGrpc(master_->Lookup(Context().get(), req, &resp));
  if (!s.ok()) return s;
  std::vector<bool> found;
  for (const v1::ObjectLocation& o : resp.objects()) found.push_back(o.found());
  return found;
}

std::string FindIpTool() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"}) {
    if (access(p, X_OK) == 0) return p;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<NetNs>> NetNs::Create() {
  if (!IsRoot()) return absl::FailedPreconditionError("network namespaces need root");
  std::unique_ptr<NetNs> ns(new NetNs());
  ns->ip_ = FindIpTool();
  if (ns->ip_.empty()) return absl::FailedPreconditionError("the `ip` tool is not installed");
  // Interface names are at most 15 bytes; a pid has at most 7 digits.
  pid_t pid = getpid();
  ns->name_ = absl::StrCat("shelf-fault-", pid);
  ns->root_if_ = absl::StrCat("sfr", pid);
  ns->ns_if_ = absl::StrCat("sfn", pid);
  // A /30 in 10.231.0.0/16 chosen by pid.
  uint32_t base = (static_cast<uint32_t>(pid) % 16384) * 4;
  std::string prefix = absl::StrCat("10.231.", base / 256, ".");
  ns->root_ip_ = absl::StrCat(prefix, base % 256 + 1);
  ns->ns_ip_ = absl::StrCat(prefix, base % 256 + 2);
  const std::string ip = ShellQuote(ns->ip_);
  // Leftovers of a crashed run with the same pid go first.
  RunShell(absl::StrCat(ip, " netns del ", ns->name_));
  RunShell(absl::StrCat(ip, " link del ", ns->root_if_));
  const std::vector<std::string> steps = {
      absl::StrCat(ip, " netns add ", ns->name_),
      absl::StrCat(ip, " link add ", ns->root_if_, " type veth peer name ", ns->ns_if_),
      absl::StrCat(ip, " link set ", ns->ns_if_, " netns ", ns->name_),
      absl::StrCat(ip, " addr add ", ns->root_ip_, "/30 dev ", ns->root_if_),
      absl::StrCat(ip, " link set ", ns->root_if_, " up"),
      absl::StrCat(ip, " netns exec ", ns->name_, " ", ip, " addr add ", ns->ns_ip_, "/30 dev ",
                   ns->ns_if_),
      absl::StrCat(ip, " netns exec ", ns->name_, " ", ip, " link set ", ns->ns_if_, " up"),
      absl::StrCat(ip, " netns exec ", ns->name_, " ", ip, " link set lo up"),
  };
  for (const std::string& step : steps) {
    std::string out;
    if (RunShell(step, &out) != 0) {
      return absl::FailedPreconditionError(absl::StrCat("'", step, "' failed: ", out));
    }
  }
  return ns;
}

NetNs::~NetNs() {
  const std::string ip = ShellQuote(ip_);
  RunShell(absl::StrCat(ip, " netns del ", name_));
  RunShell(absl::StrCat(ip, " link del ", root_if_));
}

absl::Status NetNs::SetLink(bool up) {
  std::string out;
  std::string cmd = absl::StrCat(ShellQuote(ip_), " link set ", root_if_, up ? " up" : " down");
  if (RunShell(cmd, &out) != 0) {
    return absl::InternalError(absl::StrCat("'", cmd, "' failed: ", out));
  }
  return absl::OkStatus();
}

std::vector<std::string> NetNs::Wrap(const std::vector<std::string>& argv) const {
  std::vector<std::string> out = {ip_, "netns", "exec", name_};
  out.insert(out.end(), argv.begin(), argv.end());
  return out;
}

}  // namespace shelf::fault
