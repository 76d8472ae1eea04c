// fault_put_helper: a writer that dies in the middle of a put, for
// put_crash_test. It starts a put through the master's gRPC API, writes
// part (or all) of the block to the granted store over the TCP data plane,
// writes "PUT_ID" to the ready file, and then waits to be killed; it never
// commits.
//
//   fault_put_helper MASTER KEY SIZE half|full READY_FILE [SECRET_FILE]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/net.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "transport/session.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

int Die(const std::string& what) {
  std::fprintf(stderr, "fault_put_helper: %s\n", what.c_str());
  return 1;
}

int Main(int argc, char** argv) {
  if (argc < 6) return Die("usage: MASTER KEY SIZE half|full READY_FILE [SECRET_FILE]");
  const std::string master = argv[1], key = argv[2], mode = argv[4], ready = argv[5];
  const uint64_t size = std::strtoull(argv[3], nullptr, 10);
  std::string secret;
  if (argc > 6) {
    absl::StatusOr<std::string> s = ReadSecretFile(argv[6]);
    if (!s.ok()) return Die(std::string(s.status().message()));
    secret = *s;
  }
  std::string data(size, '\0');
  for (uint64_t i = 0; i < size; ++i) data[i] = static_cast<char>(i * 131 + 7);

  auto channel = MakeChannel(master, TlsFiles());
  if (!channel.ok()) return Die(std::string(channel.status().message()));
  auto stub = v1::MasterService::NewStub(*channel);
  v1::PutStartRequest req;
  req.set_key(key);
  req.set_size(size);
  req.set_checksum(BlockChecksum(data.data(), data.size()));
  v1::PutStartResponse resp;
  grpc::ClientContext ctx;
  PrepareContext(&ctx, AuthToken(secret), 10000);
  grpc::Status gs = stub->PutStart(&ctx, req, &resp);
  if (!gs.ok()) return Die("PutStart: " + gs.error_message());
  if (resp.state() != v1::PUT_STARTED || resp.replicas_size() != 1) {
    return Die(absl::StrCat("PutStart answered state ", resp.state()));
  }
  const v1::Replica& r = resp.replicas(0);
  const v1::WriteGrant& wg = resp.grants(0);

  // The data plane by hand, so the frame can stop half way.
  absl::StatusOr<HostPort> hp = ParseHostPort(r.store().data_address());
  if (!hp.ok()) return Die(std::string(hp.status().message()));
  absl::StatusOr<int> fd = TcpConnect(*hp, 5000);
  if (!fd.ok()) return Die(std::string(fd.status().message()));
  SetIoTimeoutMs(*fd, 5000);
  wire::Session session;
  if (absl::Status s = wire::ClientHandshake(*fd, secret, &session); !s.ok()) {
    return Die(absl::StrCat("handshake: ", s.message()));
  }
  char head[wire::kHeaderBytes];
  char reply[wire::kHeaderBytes];

  const wire::Grant g = ToWireGrant(wg);
  std::string extra = wire::EncodeGrant(g);
  wire::Header w;
  w.op = wire::Op::kWrite;
  w.request_id = 1;
  w.segment_id = r.segment_id();
  w.offset = r.offset();
  w.length = size;
  w.extra_len = static_cast<uint32_t>(extra.size());
  wire::EncodeHeader(w, head);
  uint64_t send = mode == "full" ? size : size / 2;
  session.send.Begin(w.op);
  session.send.Add(head, sizeof(head));
  session.send.Add(extra.data(), extra.size());
  session.send.AddPayload(data.data(), size);
  std::string tag = session.send.Finish();
  if (!WriteFull(*fd, head, sizeof(head)).ok() ||
      !WriteFull(*fd, extra.data(), extra.size()).ok() || !WriteFull(*fd, data.data(), send).ok() ||
      (mode == "full" && !WriteFull(*fd, tag.data(), tag.size()).ok())) {
    return Die("WRITE not sent");
  }
  if (mode == "full") {
    if (!ReadFull(*fd, reply, sizeof(reply)).ok()) return Die("no WRITE reply");
  }
  {
    std::ofstream out(ready + ".tmp");
    out << resp.put_id() << "\n";
  }
  std::rename((ready + ".tmp").c_str(), ready.c_str());
  // Never commits: wait for SIGKILL (bounded, in case the test is gone).
  for (int i = 0; i < 600; ++i) std::this_thread::sleep_for(std::chrono::seconds(1));
  return 0;
}

}  // namespace
}  // namespace shelf

int main(int argc, char** argv) { return shelf::Main(argc, argv); }
