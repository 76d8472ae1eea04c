// The same-host shared-memory path against real processes (shelf-master,
// shelf-store, real Unix sockets): a peer that receives the segment cannot
// resize it; a client maps only a sealed segment, from the uid it expects;
// a store offers shm only from a private run directory, to the uids it
// allows. Every refusal leaves the data path on tcp, with correct bytes.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <thread>

#include "absl/base/internal/endian.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "common/hmac.h"
#include "common/net.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"
#include "transport/fd_passing.h"
#include "transport/shm.h"
#include "transport/shm_handshake.h"

namespace shelf {
namespace {

using fault::BlockBytes;

constexpr char kSecret[] = "shm-security-test-secret-0123456789";
constexpr uint64_t kDramBytes = 32ull << 20;
constexpr uint32_t kOtherUid = 4242;  // no process of the test runs as it

std::string ReadAll(const std::string& path) {
  std::ifstream in(path);
  std::stringstream ss;
  ss << in.rdbuf();
  return ss.str();
}

int Connect(const std::string& path) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  if (fd >= 0 && connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

// The client's side of the handshake done by hand, so that the test holds
// the descriptor a peer receives. Returns the store's status code; *memfd
// is the descriptor (or -1).
uint32_t RawAttach(const std::string& path, int* memfd) {
  *memfd = -1;
  int fd = Connect(path);
  if (fd < 0) return static_cast<uint32_t>(absl::StatusCode::kUnavailable);
  SetIoTimeoutMs(fd, 10000);
  char hello[transport::kShmHelloBytes];
  uint32_t code = static_cast<uint32_t>(absl::StatusCode::kUnavailable);
  if (ReadFull(fd, hello, sizeof(hello)).ok()) {
    std::string mac =
        transport::ShmMac(kSecret, absl::string_view(hello + 4, transport::kShmNonceBytes));
    if (WriteFull(fd, mac.data(), mac.size()).ok()) {
      char reply[16];
      int got = -1;
      if (transport::RecvWithFd(fd, reply, sizeof(reply), &got) == sizeof(reply)) {
        code = absl::little_endian::Load32(reply);
        if (got >= 0) *memfd = got;
      } else if (got >= 0) {
        close(got);
      }
    }
  }
  close(fd);
  return code;
}

// FAULT INJECTION: a fake store on a store's socket path that answers every
// handshake with an UNSEALED memfd the size of the segment, filled with a
// byte no block holds. A client that mapped it would read (and write) that.
class FaultInjectionUnsealedShmPeer {
 public:
  explicit FaultInjectionUnsealedShmPeer(const std::string& path) {
    memfd_ = memfd_create("fault-injection-unsealed", MFD_CLOEXEC);
    EXPECT_GE(memfd_, 0);
    EXPECT_EQ(ftruncate(memfd_, kDramBytes), 0);
    void* p = mmap(nullptr, kDramBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd_, 0);
    EXPECT_NE(p, MAP_FAILED);
    std::memset(p, 0x5A, kDramBytes);
    munmap(p, kDramBytes);
    unlink(path.c_str());  // the real store's socket: this one answers instead
    listen_fd_ = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_un addr;
    std::memset(&addr, 0, sizeof(addr));
    addr.sun_family = AF_UNIX;
    std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
    EXPECT_EQ(bind(listen_fd_, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)), 0);
    EXPECT_EQ(listen(listen_fd_, 8), 0);
    thread_ = std::thread([this] { Loop(); });
  }
  ~FaultInjectionUnsealedShmPeer() {
    shutdown(listen_fd_, SHUT_RDWR);
    thread_.join();
    close(listen_fd_);
    close(memfd_);
  }
  int handshakes() const { return handshakes_.load(); }

 private:
  void Loop() {
    for (;;) {
      int fd = accept4(listen_fd_, nullptr, nullptr, SOCK_CLOEXEC);
      if (fd < 0) return;
      SetIoTimeoutMs(fd, 10000);
      char hello[transport::kShmHelloBytes] = {0};
      absl::little_endian::Store32(hello, transport::kShmMagic);
      char mac[kMacBytes];
      if (WriteFull(fd, hello, sizeof(hello)).ok() && ReadFull(fd, mac, sizeof(mac)).ok()) {
        char reply[16] = {0};  // OK, segment 0, the segment's size
        absl::little_endian::Store64(reply + 8, kDramBytes);
        struct iovec iov = {reply, sizeof(reply)};
        if (transport::SendWithFd(fd, &iov, 1, memfd_) == sizeof(reply)) handshakes_.fetch_add(1);
      }
      close(fd);
    }
  }

  int memfd_ = -1;
  int listen_fd_ = -1;
  std::atomic<int> handshakes_{0};
  std::thread thread_;
};

class ShmSecurityTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.stores = 0;  // each test starts the store it needs
    o.dram_bytes = kDramBytes;
    o.bin_dir = TestBinDir();
    o.secret = kSecret;
    auto c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
  }

  std::unique_ptr<Client> OpenClient(int64_t shm_store_uid = -1) {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.secret = kSecret;
    co.shm_store_uid = shm_store_uid;
    co.location_cache_entries = 0;  // every get moves the block
    std::unique_ptr<Client> client;
    Status s = Client::Open(co, &client);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return client;
  }

  // Puts and gets `rounds` blocks through `client`; the bytes must match.
  void RoundTrip(Client* client, const std::string& prefix, int rounds) {
    for (int i = 0; i < rounds; ++i) {
      const std::string key = absl::StrCat(prefix, i);
      std::string data = BlockBytes(256 << 10, i + 1);
      Status put = client->Put(key, data.data(), data.size());
      ASSERT_TRUE(put.ok()) << key << ": " << put.ToString();
      std::string got;
      Status get = client->Get(key, &got);
      ASSERT_TRUE(get.ok()) << key << ": " << get.ToString();
      ASSERT_TRUE(got == data) << key << ": wrong bytes";
    }
  }

  std::string StoreLog(int i) { return ReadAll(cluster_->store_log(i)); }
  std::string Socket(int i) {
    return absl::StrCat(cluster_->work_dir(), "/store", i, ".run/shm.sock");
  }

  std::unique_ptr<LocalCluster> cluster_;
};

TEST_F(ShmSecurityTest, APeerCannotResizeTheSegmentAndTheStoreKeepsServing) {
  ASSERT_TRUE(cluster_->AddStore().ok());
  int memfd = -1;
  ASSERT_EQ(RawAttach(Socket(0), &memfd), 0u);
  ASSERT_GE(memfd, 0);
  const int seals = fcntl(memfd, F_GET_SEALS);
  EXPECT_EQ(seals & (F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL),
            F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_SEAL);
  // Shrinking it would leave the store's and every engine's mapping
  // unbacked (SIGBUS); growing or lifting the seals is refused alike.
  errno = 0;
  EXPECT_EQ(ftruncate(memfd, 0), -1);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(ftruncate(memfd, kDramBytes / 2), -1);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(ftruncate(memfd, 2 * kDramBytes), -1);
  EXPECT_EQ(errno, EPERM);
  errno = 0;
  EXPECT_EQ(fcntl(memfd, F_ADD_SEALS, F_SEAL_WRITE), -1);
  EXPECT_EQ(errno, EPERM);
  struct stat st;
  ASSERT_EQ(fstat(memfd, &st), 0);
  EXPECT_EQ(static_cast<uint64_t>(st.st_size), kDramBytes);
  close(memfd);

  // The store is alive and serves over shared memory, as before.
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "after-truncate-", 4);
  EXPECT_TRUE(cluster_->store_process(0)->Running());
  ClientStats st2 = client->stats();
  EXPECT_GT(st2.bytes_loaded_shm, 0u);
  EXPECT_EQ(st2.shm_refusals, 0u);
}

TEST_F(ShmSecurityTest, AnUnsealedSegmentIsRefusedAndTheClientUsesTcp) {
  ASSERT_TRUE(cluster_->AddStore().ok());
  FaultInjectionUnsealedShmPeer fake(Socket(0));
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "unsealed-", 6);
  ClientStats st = client->stats();
  EXPECT_GE(fake.handshakes(), 1);
  EXPECT_EQ(st.shm_refusals, 1u) << "refused once, not per op";
  EXPECT_EQ(st.bytes_loaded_shm, 0u);
  EXPECT_EQ(st.bytes_loaded_tcp, 6u * (256 << 10));
  EXPECT_TRUE(absl::StrContains(client->MetricsText(), "shelf_client_shm_refusals_total 1"));
  // The product's attach says why.
  transport::ShmAttachments attachments(kSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = attachments.Get(Socket(0));
  EXPECT_EQ(m.status().code(), absl::StatusCode::kFailedPrecondition) << m.status();
  EXPECT_TRUE(absl::StrContains(m.status().message(), "not sealed")) << m.status();
}

TEST_F(ShmSecurityTest, AWorldWritableRunDirRefusesShmAndReadsGoOverTcp) {
  const std::string run = cluster_->work_dir() + "/store0.run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chmod(run.c_str(), 0777), 0);
  ASSERT_TRUE(cluster_->AddStore().ok());
  const std::string log = StoreLog(0);
  EXPECT_TRUE(absl::StrContains(log, "SHARED MEMORY REFUSED")) << log;
  EXPECT_TRUE(absl::StrContains(log, "world-writable (mode 0777)")) << log;
  struct stat st;
  EXPECT_NE(stat(Socket(0).c_str(), &st), 0) << "no socket in an unsafe directory";
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "world-writable-", 4);
  EXPECT_EQ(client->stats().bytes_loaded_shm, 0u);
  EXPECT_EQ(client->stats().bytes_loaded_tcp, 4u * (256 << 10));
}

TEST_F(ShmSecurityTest, ARunDirOfAnotherUserRefusesShm) {
  const std::string run = cluster_->work_dir() + "/store0.run";
  ASSERT_EQ(mkdir(run.c_str(), 0700), 0);
  ASSERT_EQ(chown(run.c_str(), kOtherUid, kOtherUid), 0);
  ASSERT_TRUE(cluster_->AddStore().ok());
  const std::string log = StoreLog(0);
  EXPECT_TRUE(absl::StrContains(log, "SHARED MEMORY REFUSED")) << log;
  EXPECT_TRUE(absl::StrContains(log, absl::StrCat("owned by uid ", kOtherUid))) << log;
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "other-owner-", 2);
  EXPECT_EQ(client->stats().bytes_loaded_shm, 0u);
}

TEST_F(ShmSecurityTest, APeerUidNotOnTheAllowListIsRefused) {
  ASSERT_TRUE(cluster_->AddStore({"--shm-allow-uids", std::to_string(kOtherUid)}).ok());
  int memfd = -1;
  EXPECT_EQ(RawAttach(Socket(0), &memfd),
            static_cast<uint32_t>(absl::StatusCode::kPermissionDenied));
  EXPECT_LT(memfd, 0) << "no descriptor for a refused uid";
  if (memfd >= 0) close(memfd);
  EXPECT_TRUE(absl::StrContains(StoreLog(0), "peer uid not allowed"));

  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  RoundTrip(client.get(), "not-allowed-", 4);
  ClientStats st = client->stats();
  EXPECT_EQ(st.shm_refusals, 1u);
  EXPECT_EQ(st.bytes_loaded_shm, 0u);
  EXPECT_EQ(st.bytes_loaded_tcp, 4u * (256 << 10));
}

TEST_F(ShmSecurityTest, AClientRefusesASocketServedByAnotherUid) {
  // A process of another user binds a socket where an engine expects its
  // store's: a child that drops to kOtherUid, listens, and takes two
  // connections. Only raw system calls run in the child.
  // (Outside the cluster's directory, which that user cannot enter.)
  std::string dir = "/tmp/shelf-other-uid-XXXXXX";
  ASSERT_NE(mkdtemp(dir.data()), nullptr);
  ASSERT_EQ(chown(dir.c_str(), kOtherUid, kOtherUid), 0);
  const std::string path = dir + "/shm.sock";
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  int ready[2];
  ASSERT_EQ(pipe2(ready, O_CLOEXEC), 0);
  const pid_t parent = getpid();
  pid_t child = fork();
  ASSERT_GE(child, 0);
  if (child == 0) {
    close(ready[0]);
    if (setgid(kOtherUid) != 0 || setuid(kOtherUid) != 0) _exit(10);
    // After setuid, which clears it: the child dies with the test process.
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent) _exit(13);
    int fd = socket(AF_UNIX, SOCK_STREAM, 0);
    if (fd < 0 || bind(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) != 0 ||
        listen(fd, 4) != 0) {
      _exit(11);
    }
    char one = 1;
    if (write(ready[1], &one, 1) != 1) _exit(12);
    for (;;) {
      int c = accept(fd, nullptr, nullptr);
      if (c >= 0) close(c);
    }
  }
  close(ready[1]);
  // Whatever ends this test, the child goes with it.
  struct KillChild {
    pid_t pid;
    ~KillChild() {
      kill(pid, SIGKILL);
      waitpid(pid, nullptr, 0);
    }
  } kill_child{child};
  char one = 0;
  ASSERT_EQ(read(ready[0], &one, 1), 1) << "the child could not listen as uid " << kOtherUid;
  close(ready[0]);

  transport::ShmAttachments expect_self(kSecret);  // default: this process's uid (root) or root
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = expect_self.Get(path);
  EXPECT_EQ(m.status().code(), absl::StatusCode::kPermissionDenied) << m.status();
  EXPECT_TRUE(absl::StrContains(m.status().message(), absl::StrCat("uid ", kOtherUid)))
      << m.status();
  EXPECT_EQ(expect_self.refusals(), 1u);
  // Refused once: a second ask does not reach the socket again.
  EXPECT_EQ(expect_self.Get(path).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(expect_self.refusals(), 1u);
  // Told to expect that uid, the client goes on to the handshake (which
  // this stand-in never answers).
  transport::ShmAttachments expect_other(kSecret, kOtherUid);
  m = expect_other.Get(path);
  EXPECT_NE(m.status().code(), absl::StatusCode::kPermissionDenied) << m.status();
  EXPECT_EQ(expect_other.refusals(), 0u);

  std::error_code ec;
  std::filesystem::remove_all(dir, ec);
}

}  // namespace
}  // namespace shelf
