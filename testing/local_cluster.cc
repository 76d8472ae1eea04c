#include "testing/local_cluster.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <array>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <thread>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/clock.h"
#include "common/net.h"
#include "common/rpc.h"
#include "proto/shelf.grpc.pb.h"
#include "storage/dram_segment.h"

namespace shelf {

std::string DefaultBinDir() {
  if (const char* env = std::getenv("SHELF_BIN_DIR"); env != nullptr && *env != '\0') return env;
  std::error_code ec;
  std::filesystem::path exe = std::filesystem::read_symlink("/proc/self/exe", ec);
  return ec ? "." : exe.parent_path().string();
}

absl::StatusOr<std::unique_ptr<Process>> Process::Spawn(const std::vector<std::string>& argv,
                                                        const std::string& log_path) {
  if (access(argv[0].c_str(), X_OK) != 0) {
    return absl::NotFoundError(
        absl::StrCat("no executable at ", argv[0], " (build it, or set SHELF_BIN_DIR)"));
  }
  // Built before fork: the child of a threaded process may call only
  // async-signal-safe functions until exec. A malloc there can wait for
  // ever on an allocator lock another thread held at the fork (seen under
  // ASan: a daemon that never wrote its ready file).
  std::vector<char*> args;
  args.reserve(argv.size() + 1);
  for (const std::string& a : argv) args.push_back(const_cast<char*>(a.c_str()));
  args.push_back(nullptr);
  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return absl::ResourceExhaustedError("fork failed");
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(127);
    int fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd >= 0) {
      dup2(fd, STDOUT_FILENO);
      dup2(fd, STDERR_FILENO);
    }
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, STDIN_FILENO);
    execv(args[0], args.data());
    _exit(127);
  }
  return std::unique_ptr<Process>(new Process(pid));
}

Process::~Process() { Stop(); }

bool Process::Running() {
  if (reaped_) return false;
  pid_t r = waitpid(pid_, &status_, WNOHANG);
  if (r == pid_) reaped_ = true;
  return !reaped_;
}

void Process::Signal(int sig) {
  if (!reaped_) kill(pid_, sig);
}

int Process::Wait(uint64_t timeout_ms) {
  uint64_t until = MonoMs() + timeout_ms;
  while (Running()) {
    if (MonoMs() >= until) return -1;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
  return status_;
}

void Process::Stop() {
  if (reaped_) return;
  Signal(SIGCONT);  // a stopped process cannot handle SIGTERM
  Signal(SIGTERM);
  if (Wait(3000) == -1) {
    Signal(SIGKILL);
    Wait(5000);
  }
}

absl::StatusOr<std::string> WaitForFileLine(const std::string& path, uint64_t timeout_ms,
                                            Process* process) {
  uint64_t until = MonoMs() + timeout_ms;
  while (MonoMs() < until) {
    std::ifstream in(path);
    std::string line;
    if (in && std::getline(in, line) && !line.empty()) return line;
    if (process != nullptr && !process->Running()) {
      return absl::UnavailableError(absl::StrCat("process exited before writing ", path));
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return absl::DeadlineExceededError(absl::StrCat("timed out waiting for ", path));
}

uint16_t ReadyFileMetricsPort(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    if (!absl::StartsWith(line, "metrics ")) continue;
    absl::StatusOr<HostPort> hp = ParseHostPort(line.substr(8));
    return hp.ok() ? hp->port : 0;
  }
  return 0;
}

namespace {

// A daemon that did not start: its status, with the end of its log (the
// work directory, log included, is removed with the cluster).
absl::Status StartFailed(const absl::Status& s, const std::string& log) {
  std::ifstream in(log);
  std::vector<std::string> lines;
  for (std::string line; std::getline(in, line);) {
    lines.push_back(std::move(line));
    if (lines.size() > 8) lines.erase(lines.begin());
  }
  return absl::Status(s.code(), absl::StrCat(s.message(), "; see ", log, "; it ends:\n",
                                             absl::StrJoin(lines, "\n")));
}

}  // namespace

absl::StatusOr<std::unique_ptr<LocalCluster>> LocalCluster::Start(const Options& options) {
  std::unique_ptr<LocalCluster> c(new LocalCluster());
  c->options_ = options;
  c->bin_dir_ = options.bin_dir.empty() ? DefaultBinDir() : options.bin_dir;
  if (options.work_dir.empty()) {
    std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-cluster-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) return absl::UnavailableError("mkdtemp failed");
    c->work_dir_ = tmpl;
    c->owns_work_dir_ = !options.keep_work_dir;
  } else {
    c->work_dir_ = options.work_dir;
    std::filesystem::create_directories(c->work_dir_);
  }
  std::vector<std::string> argv = {c->bin_dir_ + "/shelf-master", "--listen", "127.0.0.1:0",
                                   "--ready-file", c->work_dir_ + "/master.addr"};
  if (!options.secret.empty()) {
    c->secret_file_ = c->work_dir_ + "/secret";
    std::ofstream(c->secret_file_) << options.secret << "\n";
    ::chmod(c->secret_file_.c_str(), 0600);  // secret files must be private
    argv.push_back("--secret-file");
    argv.push_back(c->secret_file_);
  }
  argv.insert(argv.end(), options.master_args.begin(), options.master_args.end());
  auto master = Process::Spawn(argv, c->work_dir_ + "/master.log");
  if (!master.ok()) return master.status();
  c->master_ = *std::move(master);
  auto addr = WaitForFileLine(c->work_dir_ + "/master.addr", 15000, c->master_.get());
  if (!addr.ok()) return StartFailed(addr.status(), c->work_dir_ + "/master.log");
  c->master_address_ = *addr;
  c->master_metrics_port_ = ReadyFileMetricsPort(c->work_dir_ + "/master.addr");
  for (int i = 0; i < options.stores; ++i) {
    c->stores_.emplace_back();
    c->stores_.back().extra_args = options.store_args;
    if (absl::Status s = c->StartStore(i); !s.ok()) return s;
  }
  if (absl::Status s = c->WaitForLiveNodes(options.stores, 15000); !s.ok()) return s;
  if (options.wait_populated) {
    // About 2 s a GiB where each first write traps to a hypervisor, with
    // room for a loaded host.
    const uint64_t timeout_ms = 30000 + 10000 * (options.dram_bytes >> 30);
    if (absl::Status s = c->WaitForPopulated(timeout_ms); !s.ok()) return s;
  }
  return c;
}

std::string LocalCluster::store_log(int i) const {
  return absl::StrCat(work_dir_, "/store", i, ".log");
}

absl::Status LocalCluster::WaitForPopulated(uint64_t timeout_ms) {
  const uint64_t deadline = MonoMs() + timeout_ms;
  for (int i = 0; i < store_count(); ++i) {
    const std::string log = store_log(i);
    while (true) {
      std::ifstream in(log);
      const std::string text((std::istreambuf_iterator<char>(in)),
                             std::istreambuf_iterator<char>());
      if (absl::StrContains(text, storage::DramSegment::kPopulatedLog) ||
          absl::StrContains(text, storage::DramSegment::kPopulateStoppedLog)) {
        break;
      }
      if (MonoMs() >= deadline) {
        return absl::DeadlineExceededError(
            absl::StrCat("store ", i, " did not say its DRAM segment was populated within ",
                         timeout_ms, " ms; see ", log));
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
  }
  return absl::OkStatus();
}

LocalCluster::~LocalCluster() {
  for (StoreProc& s : stores_) s.process.reset();
  master_.reset();
  if (owns_work_dir_) {
    std::error_code ec;
    std::filesystem::remove_all(work_dir_, ec);
  }
}

absl::Status LocalCluster::StartStore(int i) {
  StoreProc& sp = stores_[i];
  std::string name = absl::StrCat("store", i);
  std::string ready = absl::StrCat(work_dir_, "/", name, ".addr");
  std::filesystem::remove(ready);
  std::vector<std::string> argv = {bin_dir_ + "/shelf-store",
                                   "--master",
                                   master_address_,
                                   "--listen",
                                   "127.0.0.1:0",
                                   "--dram-size",
                                   std::to_string(options_.dram_bytes),
                                   "--run-dir",
                                   absl::StrCat(work_dir_, "/", name, ".run"),
                                   "--ready-file",
                                   ready};
  if (options_.ssd_bytes > 0) {
    sp.ssd_dir = absl::StrCat(work_dir_, "/", name, ".ssd");
    argv.insert(argv.end(),
                {"--ssd-dir", sp.ssd_dir, "--ssd-size", std::to_string(options_.ssd_bytes)});
  } else {
    // Without an SSD dir the node id derives from the port; pin it so a
    // restart on another port is the same node.
    if (sp.node_id.empty()) sp.node_id = absl::StrCat("node-", i);
    argv.insert(argv.end(), {"--node-id", sp.node_id});
  }
  if (!secret_file_.empty()) argv.insert(argv.end(), {"--secret-file", secret_file_});
  argv.insert(argv.end(), sp.extra_args.begin(), sp.extra_args.end());
  auto p = Process::Spawn(argv, store_log(i));
  if (!p.ok()) return p.status();
  sp.process = *std::move(p);
  auto addr = WaitForFileLine(ready, 15000, sp.process.get());
  if (!addr.ok()) return StartFailed(addr.status(), store_log(i));
  sp.address = *addr;
  sp.metrics_port = ReadyFileMetricsPort(ready);
  return absl::OkStatus();
}

absl::StatusOr<int> LocalCluster::AddStore(const std::vector<std::string>& extra_args) {
  int live = 0;
  for (StoreProc& s : stores_) live += s.process != nullptr && s.process->Running();
  stores_.emplace_back();
  stores_.back().extra_args = extra_args;
  int i = static_cast<int>(stores_.size()) - 1;
  if (absl::Status s = StartStore(i); !s.ok()) return s;
  if (absl::Status s = WaitForLiveNodes(live + 1, 15000); !s.ok()) return s;
  return i;
}

void LocalCluster::KillStore(int i) {
  stores_[i].process->Signal(SIGKILL);
  stores_[i].process->Wait(5000);
}

absl::Status LocalCluster::RestartStore(int i) {
  stores_[i].process.reset();
  return StartStore(i);
}

absl::Status LocalCluster::WaitForLiveNodes(int live, uint64_t timeout_ms) {
  TlsFiles none;
  auto ch = MakeChannel(master_address_, none);
  if (!ch.ok()) return ch.status();
  auto admin = v1::AdminService::NewStub(*ch);
  std::string token;
  if (!options_.secret.empty()) token = AuthToken(options_.secret);
  if (!options_.admin_token.empty()) token = options_.admin_token;
  uint64_t until = MonoMs() + timeout_ms;
  int seen = -1;
  while (MonoMs() < until) {
    grpc::ClientContext ctx;
    PrepareContext(&ctx, token, 1000);
    v1::StatusResponse r;
    if (admin->Status(&ctx, v1::StatusRequest(), &r).ok()) {
      seen = 0;
      for (const auto& n : r.nodes()) seen += n.state() == v1::NODE_LIVE;
      if (seen == live) return absl::OkStatus();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  return absl::DeadlineExceededError(
      absl::StrCat("expected ", live, " live stores, saw ", seen, "; logs in ", work_dir_));
}

int LocalCluster::Shelfctl(const std::vector<std::string>& args, std::string* out) {
  std::vector<std::string> argv = {bin_dir_ + "/shelfctl", "--master", master_address_};
  if (!secret_file_.empty()) argv.insert(argv.end(), {"--secret-file", secret_file_});
  argv.insert(argv.end(), args.begin(), args.end());
  std::string cmd;
  for (const std::string& a : argv) {
    std::string q = "'";
    for (char ch : a) q += ch == '\'' ? std::string("'\\''") : std::string(1, ch);
    cmd += q + "' ";
  }
  FILE* p = popen(cmd.c_str(), "r");
  if (p == nullptr) return -1;
  std::array<char, 4096> buf;
  std::string result;
  size_t n;
  while ((n = fread(buf.data(), 1, buf.size(), p)) > 0) result.append(buf.data(), n);
  int status = pclose(p);
  if (out != nullptr) *out = result;
  return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
}

}  // namespace shelf
