// EtcdProcess (fork/exec of a real etcd, readiness by a read through
// EtcdClient) and TcpProxy (a poll(2) loop pumping bytes both ways).
#include "tests/coord/etcd_harness.h"

#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>
#include <utility>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "coord/etcd_client.h"

namespace shelf::coord::testing {

namespace {

constexpr uint64_t kReadyTimeoutMs = 15000;
constexpr int kStartAttemptsMax = 3;  // a picked port may be taken meanwhile

// Two distinct free loopback ports, held open together while picked.
absl::Status PickPorts(uint16_t* a, uint16_t* b) {
  int fds[2] = {-1, -1};
  uint16_t ports[2] = {0, 0};
  for (int i = 0; i < 2; ++i) {
    fds[i] = socket(AF_INET, SOCK_STREAM, 0);
    if (fds[i] < 0) return absl::InternalError("socket failed");
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    addr.sin_port = 0;
    socklen_t len = sizeof(addr);
    if (bind(fds[i], reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
        getsockname(fds[i], reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
      return absl::InternalError(absl::StrCat("bind failed: ", ErrnoText(errno)));
    }
    ports[i] = ntohs(addr.sin_port);
  }
  close(fds[0]);
  close(fds[1]);
  *a = ports[0];
  *b = ports[1];
  return absl::OkStatus();
}

bool IsExecutable(const std::string& path) { return access(path.c_str(), X_OK) == 0; }

}  // namespace

std::string FindEtcdBinary() {
  const char* env = getenv("SHELF_ETCD_BIN");
  if (env != nullptr && *env != '\0') return IsExecutable(env) ? env : "";
  if (IsExecutable("/usr/bin/etcd")) return "/usr/bin/etcd";
  const char* path = getenv("PATH");
  if (path == nullptr) return "";
  std::stringstream dirs(path);
  std::string dir;
  while (std::getline(dirs, dir, ':')) {
    std::string candidate = dir + "/etcd";
    if (!dir.empty() && IsExecutable(candidate)) return candidate;
  }
  return "";
}

absl::StatusOr<std::unique_ptr<EtcdProcess>> EtcdProcess::Start(
    const EtcdTls* tls, std::vector<std::string> extra_args) {
  std::string binary = FindEtcdBinary();
  if (binary.empty()) return absl::NotFoundError("no etcd binary (set SHELF_ETCD_BIN)");
  std::unique_ptr<EtcdProcess> etcd(new EtcdProcess());
  etcd->binary_ = binary;
  etcd->extra_args_ = std::move(extra_args);
  if (tls != nullptr) {
    etcd->tls_on_ = true;
    etcd->tls_ = *tls;
  }
  std::string tmpl = (std::filesystem::temp_directory_path() / "shelf-etcd-XXXXXX").string();
  if (mkdtemp(tmpl.data()) == nullptr) return absl::InternalError("mkdtemp failed");
  etcd->dir_ = tmpl;
  absl::Status last;
  for (int attempt = 0; attempt < kStartAttemptsMax; ++attempt) {
    last = PickPorts(&etcd->client_port_, &etcd->peer_port_);
    if (!last.ok()) return last;
    std::filesystem::remove_all(etcd->dir_ + "/data");
    last = etcd->Spawn();
    if (last.ok()) last = etcd->WaitReady(kReadyTimeoutMs);
    if (last.ok()) return etcd;
    etcd->Kill();
  }
  return last;
}

EtcdProcess::~EtcdProcess() {
  Kill();
  if (!dir_.empty()) {
    std::error_code ignored;
    std::filesystem::remove_all(dir_, ignored);
  }
}

std::string EtcdProcess::endpoint() const {
  return absl::StrCat(tls_on_ ? "https" : "http", "://127.0.0.1:", client_port_);
}

void EtcdProcess::Kill() {
  if (pid_ <= 0) return;
  kill(pid_, SIGKILL);
  int status = 0;
  while (waitpid(pid_, &status, 0) < 0 && errno == EINTR) {
  }
  pid_ = -1;
}

absl::Status EtcdProcess::Restart() {
  Kill();
  absl::Status s = Spawn();
  if (!s.ok()) return s;
  return WaitReady(kReadyTimeoutMs);
}

absl::Status EtcdProcess::Spawn() {
  std::string client_url = endpoint();
  std::string peer_url = absl::StrCat("http://127.0.0.1:", peer_port_);
  std::vector<std::string> args = {
      binary_,
      "--name=default",
      "--data-dir=" + dir_ + "/data",
      "--listen-client-urls=" + client_url,
      "--advertise-client-urls=" + client_url,
      "--listen-peer-urls=" + peer_url,
      "--initial-advertise-peer-urls=" + peer_url,
      "--initial-cluster=default=" + peer_url,
      "--logger=zap",
      "--log-outputs=stderr",
  };
  args.insert(args.end(), extra_args_.begin(), extra_args_.end());
  if (tls_on_) {
    args.push_back("--cert-file=" + tls_.cert_file);
    args.push_back("--key-file=" + tls_.key_file);
    if (tls_.client_cert_auth) {
      args.push_back("--client-cert-auth");
      args.push_back("--trusted-ca-file=" + tls_.ca_file);
    }
  }
  std::vector<char*> argv;
  argv.reserve(args.size() + 1);
  for (std::string& a : args) argv.push_back(a.data());
  argv.push_back(nullptr);
  std::string log_path = dir_ + "/etcd.log";

  pid_t parent = getpid();
  pid_t pid = fork();
  if (pid < 0) return absl::InternalError(absl::StrCat("fork: ", ErrnoText(errno)));
  if (pid == 0) {
    // Only async-signal-safe calls until exec.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    if (getppid() != parent) _exit(1);
    int log = open(log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    int null = open("/dev/null", O_RDONLY);
    if (log < 0 || null < 0) _exit(126);
    dup2(null, 0);
    dup2(log, 1);
    dup2(log, 2);
    // Nothing of the test (sockets a proxy must be able to close) leaks into etcd.
    close_range(3, ~0U, 0);
    execv(argv[0], argv.data());
    _exit(127);
  }
  pid_ = pid;
  return absl::OkStatus();
}

absl::Status EtcdProcess::WaitReady(uint64_t timeout_ms) {
  EtcdOptions options = tls_on_ ? tls_.client : EtcdOptions();
  options.call_timeout_ms = 500;
  options.attempts_max = 1;
  auto client = EtcdClient::Connect(endpoint(), options);
  if (!client.ok()) return client.status();
  uint64_t deadline = MonoMs() + timeout_ms;
  absl::Status last;
  while (MonoMs() < deadline) {
    int status = 0;
    if (waitpid(pid_, &status, WNOHANG) == pid_) {
      pid_ = -1;
      return absl::UnavailableError(absl::StrCat("etcd exited at start:\n", LogTail()));
    }
    auto r = (*client)->Range("/shelf-test/ready");
    if (r.ok()) return absl::OkStatus();
    last = r.status();
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  return absl::UnavailableError(
      absl::StrCat("etcd not ready in ", timeout_ms, " ms: ", last.ToString(), "\n", LogTail()));
}

std::string EtcdProcess::LogTail() const {
  std::ifstream f(dir_ + "/etcd.log");
  std::stringstream all;
  all << f.rdbuf();
  std::string text = all.str();
  constexpr size_t kTailBytes = 2000;
  return text.size() > kTailBytes ? text.substr(text.size() - kTailBytes) : text;
}

absl::StatusOr<std::unique_ptr<TcpProxy>> TcpProxy::Start(uint16_t target_port) {
  std::unique_ptr<TcpProxy> proxy(new TcpProxy());
  proxy->target_port_ = target_port;
  HostPort bound;
  auto fd = TcpListen(HostPort{"127.0.0.1", 0}, &bound);
  if (!fd.ok()) return fd.status();
  proxy->listen_fd_ = *fd;
  proxy->port_ = bound.port;
  if (pipe2(proxy->wake_pipe_, O_CLOEXEC | O_NONBLOCK) != 0) {
    return absl::InternalError("pipe2 failed");
  }
  proxy->thread_ = std::thread([p = proxy.get()] { p->Run(); });
  return proxy;
}

TcpProxy::~TcpProxy() {
  stopping_ = true;
  Wake();
  if (thread_.joinable()) thread_.join();
  if (listen_fd_ >= 0) close(listen_fd_);
  for (int fd : wake_pipe_) {
    if (fd >= 0) close(fd);
  }
}

void TcpProxy::Cut() {
  cut_ = true;
  Wake();
}

void TcpProxy::Heal() {
  cut_ = false;
  Wake();
}

void TcpProxy::Wake() {
  char byte = 1;
  ssize_t ignored = write(wake_pipe_[1], &byte, 1);
  (void)ignored;
}

void TcpProxy::Run() {
  std::vector<std::pair<int, int>> pairs;  // (client side, etcd side)
  auto close_pair = [&](size_t i) {
    close(pairs[i].first);
    close(pairs[i].second);
    pairs.erase(pairs.begin() + static_cast<std::ptrdiff_t>(i));
  };
  std::vector<char> buf(size_t{64} * 1024);
  while (!stopping_) {
    if (cut_) {
      while (!pairs.empty()) close_pair(pairs.size() - 1);
    }
    std::vector<pollfd> fds;
    fds.push_back({wake_pipe_[0], POLLIN, 0});
    fds.push_back({listen_fd_, POLLIN, 0});
    for (const auto& p : pairs) {
      fds.push_back({p.first, POLLIN, 0});
      fds.push_back({p.second, POLLIN, 0});
    }
    const size_t polled = pairs.size();
    if (poll(fds.data(), fds.size(), 200) <= 0) continue;
    if (fds[0].revents != 0) {
      char drain[64];
      while (read(wake_pipe_[0], drain, sizeof(drain)) > 0) {
      }
    }
    if (fds[1].revents & POLLIN) {
      int client = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (client >= 0) {
        auto upstream = cut_ ? absl::StatusOr<int>(absl::UnavailableError("cut"))
                             : TcpConnect(HostPort{"127.0.0.1", target_port_}, 1000);
        if (upstream.ok()) {
          pairs.emplace_back(client, *upstream);
        } else {
          close(client);
        }
      }
    }
    // Walk backwards so closing a pair does not shift the ones still to visit.
    for (size_t i = polled; i-- > 0;) {
      const pollfd& from_client = fds[2 + 2 * i];
      const pollfd& from_etcd = fds[3 + 2 * i];
      bool broken = false;
      for (const pollfd* side : {&from_client, &from_etcd}) {
        if (broken || side->revents == 0) continue;
        int in = side->fd;
        int out = in == pairs[i].first ? pairs[i].second : pairs[i].first;
        ssize_t n = read(in, buf.data(), buf.size());
        if (n <= 0 || !WriteFull(out, buf.data(), static_cast<size_t>(n)).ok()) broken = true;
      }
      if (broken) close_pair(i);
    }
  }
  while (!pairs.empty()) close_pair(pairs.size() - 1);
}

}  // namespace shelf::coord::testing
