#include "tools/bench/raw_io.h"

#include <fcntl.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstring>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/errno_text.h"

namespace shelf::bench {

bool StopRequested();  // main.cc: SIGINT/SIGTERM arrived

void Stamp(uint64_t id, char* block) { std::memcpy(block, &id, sizeof(id)); }

bool SameBlock(uint64_t id, const char* data, const char* base, uint64_t size) {
  return size >= sizeof(id) && std::memcmp(data, &id, sizeof(id)) == 0 &&
         std::memcmp(data + sizeof(id), base + sizeof(id), size - sizeof(id)) == 0;
}

absl::Status OnThreads(int depth, uint64_t count, Measure* m,
                       const std::function<absl::Status(int, uint64_t)>& fn) {
  std::atomic<uint64_t> next{0};
  std::vector<std::vector<double>> lat(static_cast<size_t>(depth));
  std::vector<absl::Status> errors(static_cast<size_t>(depth));
  std::vector<std::thread> threads;
  threads.reserve(static_cast<size_t>(depth));
  for (int t = 0; t < depth; ++t) {
    threads.emplace_back([&, t] {
      for (uint64_t i = next.fetch_add(1); i < count && !StopRequested(); i = next.fetch_add(1)) {
        uint64_t t0 = MonoUs();
        absl::Status s = fn(t, i);
        lat[static_cast<size_t>(t)].push_back(static_cast<double>(MonoUs() - t0));
        if (!s.ok()) {
          errors[static_cast<size_t>(t)] = s;
          next.store(count);
          return;
        }
      }
    });
  }
  for (std::thread& th : threads) th.join();
  for (const std::vector<double>& l : lat) {
    for (double v : l) m->lat_us.Add(v);
  }
  for (const absl::Status& e : errors) {
    if (!e.ok()) return e;
  }
  return absl::OkStatus();
}

absl::Status RawWrite(const std::string& path, const char* base, uint64_t size, uint64_t count,
                      int depth, Measure* m) {
  int fd = open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT | O_CLOEXEC, 0644);
  if (fd < 0) {
    return absl::UnavailableError(absl::StrCat("open ", path, " with O_DIRECT: ", ErrnoText(errno),
                                               " (tmpfs has no O_DIRECT: pass --dir on a disk)"));
  }
  // Preallocated, as the tier's extent file is: extending O_DIRECT writes
  // are serialized by the file system.
  if (posix_fallocate(fd, 0, static_cast<off_t>(count * size)) != 0) {
    close(fd);
    return absl::UnavailableError(absl::StrCat("fallocate ", path, ": no room"));
  }
  std::vector<std::unique_ptr<AlignedBuffer>> bufs;
  for (int t = 0; t < depth; ++t) {
    bufs.push_back(std::make_unique<AlignedBuffer>(size));
    std::memcpy(bufs.back()->data, base, size);
  }
  uint64_t start = MonoUs();
  absl::Status s = OnThreads(depth, count, m, [&](int t, uint64_t i) {
    char* b = bufs[static_cast<size_t>(t)]->data;
    Stamp(i, b);
    ssize_t n = pwrite(fd, b, size, static_cast<off_t>(i * size));
    if (n != static_cast<ssize_t>(size)) {
      return absl::UnavailableError(absl::StrCat("write ", path, ": ", ErrnoText(errno)));
    }
    return absl::OkStatus();
  });
  fdatasync(fd);
  m->seconds = (MonoUs() - start) / 1e6;
  m->bytes = m->lat_us.count() * size;
  close(fd);
  return s;
}

absl::Status RawRead(const std::string& path, const char* base, uint64_t size, uint64_t count,
                     int depth, Measure* m, uint64_t* mismatches) {
  int fd = open(path.c_str(), O_RDONLY | O_DIRECT | O_CLOEXEC);
  if (fd < 0) return absl::UnavailableError(absl::StrCat("open ", path, ": ", ErrnoText(errno)));
  std::vector<std::unique_ptr<AlignedBuffer>> bufs;
  bufs.reserve(static_cast<size_t>(depth));
  for (int t = 0; t < depth; ++t) bufs.push_back(std::make_unique<AlignedBuffer>(size));
  std::atomic<uint64_t> bad{0};
  uint64_t start = MonoUs();
  absl::Status s = OnThreads(depth, count, m, [&](int t, uint64_t i) {
    char* b = bufs[static_cast<size_t>(t)]->data;
    ssize_t n = pread(fd, b, size, static_cast<off_t>(i * size));
    if (n != static_cast<ssize_t>(size)) {
      return absl::UnavailableError(absl::StrCat("read ", path, ": ", ErrnoText(errno)));
    }
    if (!SameBlock(i, b, base, size)) bad.fetch_add(1);
    return absl::OkStatus();
  });
  m->seconds = (MonoUs() - start) / 1e6;
  m->bytes = m->lat_us.count() * size;
  *mismatches += bad.load();
  close(fd);
  return s;
}

}  // namespace shelf::bench
