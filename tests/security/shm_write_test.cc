// Same-host puts against real processes (shelf-master, shelf-store, real
// Unix sockets): the segment a client receives cannot be written through;
// an shm put is copied in by the store only under a valid grant for that
// range, refused like the same put over tcp otherwise, and the segment is
// then unchanged; shm puts and gets of many sizes round-trip; a put from
// shared host memory is copied once, by the store, which maps only memfds
// that cannot shrink and copies only inside them.
#include <errno.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <thread>
#include <vector>

#include "absl/base/internal/endian.h"
#include "absl/strings/str_cat.h"
#include "client/write_grant.h"
#include "common/checksum.h"
#include "common/clock.h"
#include "common/errno_text.h"
#include "common/net.h"
#include "shelf/client.h"
#include "testing/local_cluster.h"
#include "testing/test_paths.h"
#include "tests/fault/fault_util.h"
#include "transport/fd_passing.h"
#include "transport/shm.h"
#include "transport/shm_engine.h"
#include "transport/shm_handshake.h"
#include "transport/tcp_client.h"
#include "transport/wire.h"

namespace shelf {

namespace wire = transport::wire;

namespace {

using fault::BlockBytes;

constexpr char kSecret[] = "shm-write-test-secret-0123456789ab";
constexpr uint64_t kDramBytes = 192ull << 20;

// The client's side of the handshake done by hand: the connected socket
// (-1 when the handshake fails), and in *memfd the descriptor the store
// sent with its answer (-1: none).
int RawHandshake(const std::string& path, int* memfd) {
  *memfd = -1;
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un addr;
  std::memset(&addr, 0, sizeof(addr));
  addr.sun_family = AF_UNIX;
  std::strncpy(addr.sun_path, path.c_str(), sizeof(addr.sun_path) - 1);
  char hello[transport::kShmHelloBytes];
  char reply[16];
  bool ok = fd >= 0 && connect(fd, reinterpret_cast<struct sockaddr*>(&addr), sizeof(addr)) == 0;
  if (ok) SetIoTimeoutMs(fd, 10000);
  ok = ok && ReadFull(fd, hello, sizeof(hello)).ok();
  std::string mac =
      ok ? transport::ShmMac(kSecret, absl::string_view(hello + 4, transport::kShmNonceBytes)) : "";
  ok = ok && WriteFull(fd, mac.data(), mac.size()).ok() &&
       transport::RecvWithFd(fd, reply, sizeof(reply), memfd) == sizeof(reply) &&
       absl::little_endian::Load32(reply) == 0;
  if (!ok) {
    if (*memfd >= 0) close(*memfd);
    *memfd = -1;
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

// The descriptor a peer receives (or -1).
int RawAttach(const std::string& path) {
  int memfd = -1;
  int fd = RawHandshake(path, &memfd);
  if (fd >= 0) close(fd);
  return memfd;
}

// The socket, kept for requests (or -1).
int RawChannel(const std::string& path) {
  int memfd = -1;
  int fd = RawHandshake(path, &memfd);
  if (memfd >= 0) close(memfd);
  return fd;
}

class ShmWriteTest : public ::testing::Test {
 protected:
  void SetUp() override {
    LocalCluster::Options o;
    o.stores = 1;
    o.dram_bytes = kDramBytes;
    o.bin_dir = TestBinDir();
    o.secret = kSecret;
    o.master_args = {"--put-timeout", "2s"};
    auto c = LocalCluster::Start(o);
    ASSERT_TRUE(c.ok()) << c.status();
    cluster_ = *std::move(c);
    probe_ = std::make_unique<fault::FaultProbe>(cluster_->master_address(), kSecret);
    peer_.node_id = "store0";
    peer_.host_id = HostId();
    peer_.set_route(transport::Kind::kShm, Socket());
  }

  std::string Socket() { return cluster_->work_dir() + "/store0.run/shm.sock"; }

  std::unique_ptr<Client> OpenClient() {
    ClientOptions co;
    co.masters = {cluster_->master_address()};
    co.secret = kSecret;
    co.location_cache_entries = 0;  // every get moves the block
    std::unique_ptr<Client> client;
    Status s = Client::Open(co, &client);
    EXPECT_TRUE(s.ok()) << s.ToString();
    return client;
  }

  // A real grant from the master for a block of `size`.
  v1::PutStartResponse StartPut(const std::string& key, const std::string& data) {
    v1::PutStartRequest req;
    req.set_key(key);
    req.set_size(data.size());
    req.set_checksum(BlockChecksum(data.data(), data.size()));
    v1::PutStartResponse resp;
    grpc::Status s = probe_->master()->PutStart(probe_->Context().get(), req, &resp);
    EXPECT_TRUE(s.ok()) << s.error_message();
    EXPECT_EQ(resp.state(), v1::PUT_STARTED);
    return resp;
  }

  void Commit(uint64_t put_id) {
    v1::PutCommitRequest commit;
    commit.add_put_ids(put_id);
    v1::PutCommitResponse resp;
    ASSERT_TRUE(probe_->master()->PutCommit(probe_->Context().get(), commit, &resp).ok());
    ASSERT_EQ(resp.statuses(0).code(), 0);
  }

  static wire::Grant ToWire(const v1::WriteGrant& g) { return ToWireGrant(g); }

  // A new client reads `key` back as `data`.
  void ExpectBlock(const std::string& key, const std::string& data) {
    std::unique_ptr<Client> client = OpenClient();
    ASSERT_NE(client, nullptr);
    std::string got;
    ASSERT_TRUE(client->Get(key, &got).ok()) << key;
    EXPECT_TRUE(got == data) << key << ": wrong bytes";
  }

  // One shm write of `data` to [offset, +size) of `segment` under `grant`.
  absl::Status ShmWrite(transport::ShmEngine* engine, const wire::Grant& grant, uint32_t segment,
                        uint64_t offset, const std::string& data) {
    auto h = engine->RegisterMemory(const_cast<char*>(data.data()), data.size(),
                                    transport::MemoryKind::kHost);
    if (!h.ok()) return h.status();
    transport::Op op{transport::OpKind::kWrite, *h, 0, &peer_, segment, offset, data.size(),
                     wire::EncodeGrant(grant)};
    absl::Status s = engine->Execute({&op, 1}, MonoMs() + 30000);
    engine->UnregisterMemory(*h).IgnoreError();
    return s;
  }

  std::unique_ptr<LocalCluster> cluster_;
  std::unique_ptr<fault::FaultProbe> probe_;
  transport::Peer peer_;
};

TEST_F(ShmWriteTest, TheSegmentAPeerReceivesCannotBeWrittenThrough) {
  int memfd = RawAttach(Socket());
  ASSERT_GE(memfd, 0);
  const int seals = fcntl(memfd, F_GET_SEALS);
  const bool future_write = seals >= 0 && (seals & F_SEAL_FUTURE_WRITE) != 0;
  const bool read_only = (fcntl(memfd, F_GETFL) & O_ACCMODE) == O_RDONLY;
  EXPECT_TRUE(future_write || read_only) << "seals " << seals;
  errno = 0;
  void* w = mmap(nullptr, kDramBytes, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
  EXPECT_EQ(w, MAP_FAILED);
  EXPECT_TRUE(errno == EPERM || errno == EACCES) << errno;
  if (w != MAP_FAILED) munmap(w, kDramBytes);
  char byte = 'x';
  errno = 0;
  EXPECT_EQ(pwrite(memfd, &byte, 1, 4096), -1);
  EXPECT_TRUE(errno == EPERM || errno == EBADF) << errno;
  // A read-only mapping cannot be made writable later.
  void* r = mmap(nullptr, kDramBytes, PROT_READ, MAP_SHARED, memfd, 0);
  ASSERT_NE(r, MAP_FAILED);
  EXPECT_NE(mprotect(r, kDramBytes, PROT_READ | PROT_WRITE), 0);
  munmap(r, kDramBytes);
  close(memfd);

  // The product's client maps it (read-only) and puts through the store.
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  std::string data = BlockBytes(256 << 10, 5);
  ASSERT_TRUE(client->Put("after-attach", data.data(), data.size()).ok());
  std::string got;
  ASSERT_TRUE(client->Get("after-attach", &got).ok());
  EXPECT_TRUE(got == data);
  EXPECT_EQ(client->stats().bytes_stored_shm, data.size());
  EXPECT_EQ(client->stats().shm_refusals, 0u);
}

TEST_F(ShmWriteTest, ABadGrantIsRefusedLikeOverTcpAndTheSegmentIsUnchanged) {
  const uint64_t size = 64 << 10;
  const std::string data = BlockBytes(size, 7);
  v1::PutStartResponse put = StartPut("target", data);
  ASSERT_EQ(put.replicas_size(), 1);
  const wire::Grant grant = ToWire(put.grants(0));
  const uint32_t seg = put.replicas(0).segment_id();
  const uint64_t off = put.replicas(0).offset();
  const std::string store = put.replicas(0).store().data_address();
  // Another key's live grant.
  v1::PutStartResponse other_put = StartPut("other", BlockBytes(size, 8));
  const wire::Grant other = ToWire(other_put.grants(0));

  transport::ShmAttachments view(kSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = view.Get(Socket());
  ASSERT_TRUE(m.ok()) << m.status();
  const char* segment = (*m)->base;
  const std::string before(segment + off, size);

  transport::ShmEngine engine(kSecret);
  ASSERT_TRUE(engine.Reaches(peer_));
  transport::TcpDataClient::Options o;
  o.secret = kSecret;
  transport::TcpDataClient tcp(o);
  const std::string evil = BlockBytes(size, 666);
  wire::Grant forged = grant;
  forged.mac = std::string(32, '\0');
  wire::Grant widened = grant;
  widened.offset = 0;
  widened.length = kDramBytes;
  wire::Grant extended = grant;
  extended.expires_unix_ms += uint64_t{3600} * 1000;
  struct Case {
    const char* what;
    wire::Grant grant;
    uint64_t offset;
  };
  const Case cases[] = {{"forged mac", forged, off},
                        {"widened", widened, off},
                        {"extended", extended, off},
                        {"past its range", grant, off + 4096},
                        {"another key's grant", other, off}};
  for (const Case& c : cases) {
    absl::Status shm = ShmWrite(&engine, c.grant, seg, c.offset, evil);
    absl::Status over_tcp =
        tcp.Write(store, c.grant, seg, c.offset, evil.data(), size, MonoMs() + 10000);
    EXPECT_EQ(shm.code(), absl::StatusCode::kPermissionDenied) << c.what << ": " << shm;
    EXPECT_EQ(shm.code(), over_tcp.code()) << c.what << ": " << shm << " vs " << over_tcp;
    EXPECT_TRUE(std::string(segment + off, size) == before) << c.what << " changed the segment";
  }

  // The right grant on its range: copied in, committed, readable.
  ASSERT_TRUE(ShmWrite(&engine, grant, seg, off, data).ok());
  EXPECT_TRUE(std::string(segment + off, size) == data);
  Commit(put.put_id());
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  std::string got;
  ASSERT_TRUE(client->Get("target", &got).ok());
  EXPECT_TRUE(got == data);

  // After the put's deadline (--put-timeout 2s) the grant is dead: its
  // replay over shm is refused and the committed block stays.
  std::this_thread::sleep_for(std::chrono::milliseconds(
      std::max<int64_t>(0, static_cast<int64_t>(grant.expires_unix_ms - UnixMs())) + 300));
  absl::Status expired = ShmWrite(&engine, grant, seg, off, evil);
  EXPECT_EQ(expired.code(), absl::StatusCode::kPermissionDenied) << expired;
  EXPECT_TRUE(std::string(segment + off, size) == data);
  ASSERT_TRUE(client->Get("target", &got).ok());
  EXPECT_TRUE(got == data);
}

TEST_F(ShmWriteTest, ShmPutsAndGetsOfManySizesRoundTrip) {
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  // Past the staging limit too: that block moves in chunks.
  const uint64_t sizes[] = {
      1, 7, 4095, 4096, 65537, (1 << 20), (3 << 20) + 5, transport::kShmStagingBytesMax + 12345};
  uint64_t total = 0;
  int i = 0;
  for (uint64_t size : sizes) {
    const std::string key = absl::StrCat("size-", size);
    std::string data = BlockBytes(size, ++i);
    ASSERT_TRUE(client->Put(key, data.data(), data.size()).ok()) << key;
    total += size;
    std::string got;
    ASSERT_TRUE(client->Get(key, &got).ok()) << key;
    ASSERT_TRUE(got == data) << key << ": wrong bytes";
  }
  // Every block again, after the staging memory has grown.
  i = 0;
  for (uint64_t size : sizes) {
    std::string data = BlockBytes(size, ++i);
    std::string got;
    ASSERT_TRUE(client->Get(absl::StrCat("size-", size), &got).ok());
    ASSERT_TRUE(got == data) << size;
  }
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_stored_shm, total);
  EXPECT_EQ(st.bytes_staged_shm, total) << "private memory goes through staging";
  EXPECT_EQ(st.bytes_stored_tcp, 0u);
  EXPECT_EQ(st.bytes_loaded_shm, 2 * total);
  EXPECT_EQ(st.shm_refusals, 0u);
}

// A batch of writes goes out pipelined: each op gets its own answer, in
// order, a refused one in the middle changes nothing around it, and an op
// past the staging limit moves alone, in chunks, between the others.
TEST_F(ShmWriteTest, APipelinedBatchGetsEveryAnswerInOrder) {
  const uint64_t sizes[] = {64 << 10, 1 << 20, 4096, transport::kShmStagingBytesMax + 4096,
                            7,        1 << 20};
  constexpr int kOps = sizeof(sizes) / sizeof(sizes[0]);
  constexpr int kRefused = 2;  // its grant forged
  uint64_t total = 0;
  for (uint64_t size : sizes) total += size;
  void* shared = nullptr;
  ASSERT_TRUE(AllocateSharedHostMemory(total, &shared).ok());
  std::string priv(total, '\0');
  transport::ShmEngine engine(kSecret);
  auto hp = engine.RegisterMemory(priv.data(), priv.size(), transport::MemoryKind::kHost);
  auto hs = engine.RegisterMemory(shared, total, transport::MemoryKind::kHost);
  ASSERT_TRUE(hp.ok() && hs.ok());
  std::vector<transport::Op> ops;
  std::vector<std::string> data;
  std::vector<v1::PutStartResponse> puts;
  uint64_t at = 0;
  for (int i = 0; i < kOps; ++i) {
    data.push_back(BlockBytes(sizes[i], 60 + i));
    // Every other op from shared host memory.
    char* local = i % 2 == 0 ? static_cast<char*>(shared) : priv.data();
    std::memcpy(local + at, data[i].data(), sizes[i]);
    puts.push_back(StartPut(absl::StrCat("pipelined-", i), data[i]));
    ASSERT_EQ(puts[i].replicas_size(), 1);
    wire::Grant grant = ToWire(puts[i].grants(0));
    if (i == kRefused) grant.mac = std::string(32, '\0');
    ops.push_back(transport::Op{transport::OpKind::kWrite, i % 2 == 0 ? *hs : *hp, at, &peer_,
                                puts[i].replicas(0).segment_id(), puts[i].replicas(0).offset(),
                                sizes[i], wire::EncodeGrant(grant)});
    at += sizes[i];
  }
  std::shared_ptr<transport::Batch> batch = engine.Submit(ops, MonoMs() + 30000);
  batch->Wait();
  transport::ShmAttachments view(kSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = view.Get(Socket());
  ASSERT_TRUE(m.ok()) << m.status();
  for (int i = 0; i < kOps; ++i) {
    const absl::Status& s = batch->statuses()[i];
    const std::string landed((*m)->base + puts[i].replicas(0).offset(), sizes[i]);
    if (i == kRefused) {
      EXPECT_EQ(s.code(), absl::StatusCode::kPermissionDenied) << s;
      EXPECT_FALSE(landed == data[i]) << "a refused write landed";
      continue;
    }
    EXPECT_TRUE(s.ok()) << i << ": " << s;
    EXPECT_TRUE(landed == data[i]) << i << ": wrong bytes";
  }
  EXPECT_GT(engine.staged_bytes(), 0u);
  EXPECT_LT(engine.staged_bytes(), total) << "the shared ops were not staged";
  ASSERT_TRUE(engine.UnregisterMemory(*hs).ok());
  ASSERT_TRUE(FreeSharedHostMemory(shared).ok());
}

// Lines of process `pid`'s memory map naming shared host memory.
int SharedHostMappings(pid_t pid) {
  std::ifstream maps(absl::StrCat("/proc/", pid, "/maps"));
  int n = 0;
  for (std::string line; std::getline(maps, line);) {
    if (line.find("memfd:shelf-host") != std::string::npos) ++n;
  }
  return n;
}

TEST_F(ShmWriteTest, APutFromSharedHostMemoryIsCopiedOnceByTheStore) {
  std::unique_ptr<Client> client = OpenClient();
  ASSERT_NE(client, nullptr);
  const uint64_t size = (3 << 20) + 5;
  void* shared = nullptr;
  ASSERT_TRUE(AllocateSharedHostMemory(2 * size, &shared).ok());
  char* mem = static_cast<char*>(shared);
  const std::string a = BlockBytes(size, 41), b = BlockBytes(size, 42);
  std::memcpy(mem, a.data(), size);
  std::memcpy(mem + size, b.data(), size);
  const std::string priv = BlockBytes(64 << 10, 43);

  // From the start of the memory, from its middle through a registered
  // buffer (as an engine's KV pool), and from private memory.
  ASSERT_TRUE(client->Put("shared-a", mem, size).ok());
  BufferHandle pool;
  ASSERT_TRUE(client->RegisterBuffer(mem, 2 * size, &pool).ok());
  ASSERT_TRUE(client->PutFrom("shared-b", pool, size, size).ok());
  ASSERT_TRUE(client->Put("private", priv.data(), priv.size()).ok());
  ClientStats st = client->stats();
  EXPECT_EQ(st.bytes_stored_shm, 2 * size + priv.size());
  EXPECT_EQ(st.bytes_staged_shm, priv.size()) << "only the private block goes through staging";
  const pid_t store = cluster_->store_process(0)->pid();
  EXPECT_GE(SharedHostMappings(store), 1) << "the store maps the client's shared memory";
  for (const auto& [key, want] : {std::pair<std::string, const std::string*>{"shared-a", &a},
                                  {"shared-b", &b},
                                  {"private", &priv}}) {
    std::string got;
    ASSERT_TRUE(client->Get(key, &got).ok()) << key;
    EXPECT_TRUE(got == *want) << key << ": wrong bytes";
  }

  // Freed, the memory leaves the store's address space at the client's
  // next same-host put, and the blocks put from it stay.
  ASSERT_TRUE(client->UnregisterBuffer(pool).ok());
  ASSERT_TRUE(FreeSharedHostMemory(shared).ok());
  EXPECT_EQ(FreeSharedHostMemory(shared).code(), StatusCode::kInvalidArgument);
  ASSERT_TRUE(client->Put("after-free", priv.data(), priv.size()).ok());
  EXPECT_EQ(SharedHostMappings(store), 0);
  std::string got;
  ASSERT_TRUE(client->Get("shared-b", &got).ok());
  EXPECT_TRUE(got == b);
}

// One request header (transport/shm_write.h) with `attach` (-1: none)
// riding along, then `extra`; the store's status (UNAVAILABLE when the
// connection closed instead).
absl::Status RawRequest(int fd, uint32_t magic, uint32_t flags, uint32_t third, uint64_t offset,
                        uint64_t length, uint64_t src_offset, int attach,
                        const std::string& extra = "") {
  char head[transport::kShmWriteHeaderBytes];
  absl::little_endian::Store32(head, magic);
  absl::little_endian::Store32(head + 4, flags);
  absl::little_endian::Store32(head + 8, third);
  absl::little_endian::Store32(head + 12, static_cast<uint32_t>(extra.size()));
  absl::little_endian::Store64(head + 16, offset);
  absl::little_endian::Store64(head + 24, length);
  absl::little_endian::Store64(head + 32, src_offset);
  struct iovec iov = {head, sizeof(head)};
  if (transport::SendWithFd(fd, &iov, 1, attach) != static_cast<ssize_t>(sizeof(head)) ||
      !WriteFull(fd, extra.data(), extra.size()).ok()) {
    return absl::UnavailableError("send failed");
  }
  char reply[transport::kShmWriteReplyBytes];
  if (!ReadFull(fd, reply, sizeof(reply)).ok()) return absl::UnavailableError("closed");
  std::string text(absl::little_endian::Load32(reply + 4), '\0');
  if (!ReadFull(fd, text.data(), text.size()).ok()) return absl::UnavailableError("closed");
  return absl::Status(static_cast<absl::StatusCode>(absl::little_endian::Load32(reply)), text);
}

// A memfd of `size` bytes holding `data`, sealed with `seals`.
int Memfd(const std::string& data, uint64_t size, int seals) {
  int fd = memfd_create("shelf-host", MFD_CLOEXEC | MFD_ALLOW_SEALING);
  if (fd < 0 || ftruncate(fd, static_cast<off_t>(size)) != 0 ||
      pwrite(fd, data.data(), std::min<uint64_t>(size, data.size()), 0) < 0 ||
      (seals != 0 && fcntl(fd, F_ADD_SEALS, seals) != 0)) {
    ADD_FAILURE() << "memfd: " << ErrnoText(errno);
  }
  return fd;
}

TEST_F(ShmWriteTest, SourcesTheStoreCannotMapSafelyAreRefusedAndCopiesStayInBounds) {
  const uint64_t size = 64 << 10;
  const std::string data = BlockBytes(size, 51);
  v1::PutStartResponse put = StartPut("raw-source", data);
  ASSERT_EQ(put.replicas_size(), 1);
  const std::string grant = wire::EncodeGrant(ToWire(put.grants(0)));
  const uint32_t seg = put.replicas(0).segment_id();
  const uint64_t off = put.replicas(0).offset();
  transport::ShmAttachments view(kSecret);
  absl::StatusOr<std::shared_ptr<transport::ShmMapping>> m = view.Get(Socket());
  ASSERT_TRUE(m.ok()) << m.status();
  const std::string before((*m)->base + off, size);

  int fd = RawChannel(Socket());
  ASSERT_GE(fd, 0);
  const uint32_t from_slot_1 = transport::kShmWriteFlagSlot | (1u << 16);
  // An empty slot holds nothing to copy from.
  absl::Status s =
      RawRequest(fd, transport::kShmWriteMagic, from_slot_1, seg, off, size, 0, -1, grant);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // A memfd that can shrink (SIGBUS in the store's copy), and a pipe.
  int unsealed = Memfd(data, size, 0);
  s = RawRequest(fd, transport::kShmSourceMagic, transport::kShmWriteFlagFd, 1, 0, 0, 0, unsealed);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  int pipe_fds[2];
  ASSERT_EQ(pipe2(pipe_fds, O_CLOEXEC), 0);
  s = RawRequest(fd, transport::kShmSourceMagic, transport::kShmWriteFlagFd, 1, 0, 0, 0,
                 pipe_fds[0]);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  s = RawRequest(fd, transport::kShmWriteMagic, from_slot_1, seg, off, size, 0, -1, grant);
  EXPECT_EQ(s.code(), absl::StatusCode::kFailedPrecondition) << s;
  // A sealed memfd smaller than the copy asked of it: OUT_OF_RANGE.
  int sealed = Memfd(data, 4096, F_SEAL_SHRINK);
  ASSERT_TRUE(
      RawRequest(fd, transport::kShmSourceMagic, transport::kShmWriteFlagFd, 1, 0, 0, 0, sealed)
          .ok());
  s = RawRequest(fd, transport::kShmWriteMagic, from_slot_1, seg, off, size, 0, -1, grant);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  s = RawRequest(fd, transport::kShmWriteMagic, from_slot_1, seg, off, 4096, 1, -1, grant);
  EXPECT_EQ(s.code(), absl::StatusCode::kOutOfRange) << s;
  EXPECT_TRUE(std::string((*m)->base + off, size) == before) << "a refused copy wrote";
  // Grown (sealed against shrinking only), it holds the block: copied in.
  ASSERT_EQ(ftruncate(sealed, size), 0);
  ASSERT_EQ(pwrite(sealed, data.data(), size, 0), static_cast<ssize_t>(size));
  s = RawRequest(fd, transport::kShmWriteMagic, from_slot_1, seg, off, size, 0, -1, grant);
  ASSERT_TRUE(s.ok()) << s;
  EXPECT_TRUE(std::string((*m)->base + off, size) == data);
  // A slot past the last, or a write naming both a slot and a descriptor,
  // is malformed: the store closes the connection.
  int extra = Memfd(data, size, F_SEAL_SHRINK);
  s = RawRequest(fd, transport::kShmWriteMagic, from_slot_1 | transport::kShmWriteFlagFd, seg, off,
                 size, 0, extra, grant);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  close(fd);
  fd = RawChannel(Socket());
  ASSERT_GE(fd, 0);
  s = RawRequest(fd, transport::kShmSourceMagic, transport::kShmWriteFlagFd,
                 transport::kShmSourceSlots + 1, 0, 0, 0, extra);
  EXPECT_EQ(s.code(), absl::StatusCode::kUnavailable) << s;
  for (int f : {fd, unsealed, pipe_fds[0], pipe_fds[1], sealed, extra}) close(f);
  Commit(put.put_id());
  ExpectBlock("raw-source", data);
}

}  // namespace
}  // namespace shelf
