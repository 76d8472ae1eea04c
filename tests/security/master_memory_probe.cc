// Measures shelf-master's peak memory (VmHWM) while N authenticated callers,
// each on its own connection, send one RegisterStore of B MiB at once (its
// labels padded; the master parses it, then refuses its empty node id).
// Prints the figures and each call's status; judges nothing.
//   master_memory_probe N B_MiB [shelf-master flags...]
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <atomic>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "testing/local_cluster.h"

namespace shelf {
namespace {

uint64_t StatusKiB(pid_t pid, const char* field) {
  std::ifstream f(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(f, line)) {
    if (line.rfind(field, 0) != 0) continue;
    std::string digits;
    for (char c : line) {
      if (c >= '0' && c <= '9') digits += c;
    }
    uint64_t kib = 0;
    if (absl::SimpleAtoi(digits, &kib)) return kib;
  }
  return 0;
}

int Main(int argc, char** argv) {
  int n = 8;
  int mib = 60;
  if ((argc > 1 && !absl::SimpleAtoi(argv[1], &n)) ||
      (argc > 2 && !absl::SimpleAtoi(argv[2], &mib))) {
    std::fprintf(stderr, "usage: master_memory_probe N B_MiB [shelf-master flags...]\n");
    return 1;
  }
  std::string dir = "/tmp/shelf-memprobe-" + std::to_string(getpid());
  std::filesystem::create_directories(dir);
  std::string secret = "memory-probe-secret-0123456789abcdef";
  std::ofstream(dir + "/secret") << secret;
  std::filesystem::permissions(
      dir + "/secret", std::filesystem::perms::owner_read | std::filesystem::perms::owner_write);
  std::vector<std::string> args = {std::string(SHELF_BIN_DIR) + "/shelf-master",
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--ready-file",
                                   dir + "/ready",
                                   "--secret-file",
                                   dir + "/secret"};
  for (int i = 3; i < argc; ++i) args.push_back(argv[i]);
  auto master = Process::Spawn(args, dir + "/m.log");
  if (!master.ok()) return 1;
  auto addr = WaitForFileLine(dir + "/ready", 15000, master->get());
  if (!addr.ok()) return 1;
  pid_t pid = (*master)->pid();
  std::string token = AuthToken(secret);
  uint64_t start_kib = StatusKiB(pid, "VmRSS:");

  v1::RegisterStoreRequest req;
  req.set_protocol_version(1);
  (*req.mutable_labels())["pad"] = std::string(static_cast<size_t>(mib) << 20, 'p');
  std::atomic<bool> done{false};
  uint64_t peak_rss = 0;
  std::thread sampler([&] {
    while (!done.load()) {
      peak_rss = std::max(peak_rss, StatusKiB(pid, "VmRSS:"));
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  });
  std::vector<std::thread> callers;
  callers.reserve(n);
  std::vector<std::string> results(n);
  auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < n; ++i) {
    callers.emplace_back([&, i] {
      grpc::ChannelArguments ca;
      ca.SetMaxSendMessageSize(-1);
      ca.SetMaxReceiveMessageSize(-1);
      ca.SetInt("grpc.use_local_subchannel_pool", 1);
      ca.SetInt("shelf.probe", i);
      auto ch = grpc::CreateCustomChannel(*addr, grpc::InsecureChannelCredentials(), ca);
      auto stub = v1::MasterService::NewStub(ch);
      grpc::ClientContext ctx;
      PrepareContext(&ctx, token, 120000);
      v1::RegisterStoreResponse resp;
      grpc::Status s = stub->RegisterStore(&ctx, req, &resp);
      results[i] = absl::StrCat(s.error_code(), ":", s.error_message().substr(0, 80));
    });
  }
  for (auto& t : callers) t.join();
  double secs = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  done = true;
  sampler.join();
  uint64_t hwm = StatusKiB(pid, "VmHWM:");
  uint64_t end_rss = StatusKiB(pid, "VmRSS:");
  std::printf(
      "callers=%d body_mib=%d start_rss_mib=%.1f peak_rss_sampled_mib=%.1f vmhwm_mib=%.1f "
      "end_rss_mib=%.1f seconds=%.2f\n",
      n, mib, start_kib / 1024.0, peak_rss / 1024.0, hwm / 1024.0, end_rss / 1024.0, secs);
  for (int i = 0; i < n; ++i) std::printf("  call %d: %s\n", i, results[i].c_str());
  (*master)->Stop();
  std::filesystem::remove_all(dir);
  return 0;
}

}  // namespace
}  // namespace shelf

int main(int argc, char** argv) { return shelf::Main(argc, argv); }
