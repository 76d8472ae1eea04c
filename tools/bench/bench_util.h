// Shared pieces of the shelf-bench subcommands: latency samples with
// percentiles, a terminal-aware progress line, and block contents that
// can be regenerated and checked byte for byte.
#ifndef SHELF_TOOLS_BENCH_BENCH_UTIL_H_
#define SHELF_TOOLS_BENCH_BENCH_UTIL_H_

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <string>
#include <vector>

namespace shelf::bench {

class Samples {
 public:
  void Add(double v) { values_.push_back(v); }
  void Merge(const Samples& other) {
    values_.insert(values_.end(), other.values_.begin(), other.values_.end());
  }
  size_t count() const { return values_.size(); }
  double Percentile(double p) {
    if (values_.empty()) return 0;
    if (!sorted_) {
      std::sort(values_.begin(), values_.end());
      sorted_ = true;
    }
    size_t i =
        static_cast<size_t>(std::lround(p / 100.0 * static_cast<double>(values_.size() - 1)));
    return values_[std::min(i, values_.size() - 1)];
  }
  double Sum() const {
    double s = 0;
    for (double v : values_) s += v;
    return s;
  }

 private:
  std::vector<double> values_;
  bool sorted_ = false;
};

// Progress on stderr: a bar redrawn in place on a terminal, a plain line
// every 10% otherwise.
class Progress {
 public:
  Progress(std::string label, uint64_t total)
      : label_(std::move(label)), total_(total), tty_(isatty(STDERR_FILENO)) {}
  void Update(uint64_t done, const std::string& extra) {
    if (total_ == 0) return;
    int pct = static_cast<int>(done * 100 / total_);
    if (tty_) {
      int width = 30;
      int fill = pct * width / 100;
      std::fprintf(stderr, "\r%s [%s%s] %3d%% %s", label_.c_str(), std::string(fill, '#').c_str(),
                   std::string(width - fill, '.').c_str(), pct, extra.c_str());
      if (done == total_) std::fprintf(stderr, "\n");
    } else if (pct / 10 != last_decile_ || done == total_) {
      last_decile_ = pct / 10;
      std::fprintf(stderr, "%s %3d%% %s\n", label_.c_str(), pct, extra.c_str());
    }
  }

 private:
  std::string label_;
  uint64_t total_;
  bool tty_;
  int last_decile_ = -1;
};

// Block content for id `id`: a fixed random page pattern stamped with the
// id every 4 KiB, so two ids never share content and a reader can check
// every byte without storing the data.
class BlockPattern {
 public:
  explicit BlockPattern(size_t bytes) : base_(bytes) {
    uint64_t x = 0x9E3779B97F4A7C15ull;
    for (size_t i = 0; i < bytes; ++i) {
      x ^= x << 13;
      x ^= x >> 7;
      x ^= x << 17;
      base_[i] = static_cast<char>(x);
    }
  }
  size_t bytes() const { return base_.size(); }
  void Fill(uint64_t id, char* out) const {
    std::memcpy(out, base_.data(), base_.size());
    for (size_t off = 0; off + 8 <= base_.size(); off += 4096) {
      uint64_t v = id * 0x100000001B3ull + off;
      std::memcpy(out + off, &v, 8);
    }
  }
  bool Check(uint64_t id, const char* data, size_t size) const {
    if (size != base_.size()) return false;
    for (size_t off = 0; off < size; off += 4096) {
      size_t n = std::min<size_t>(4096, size - off);
      if (off + 8 <= size) {
        uint64_t v = id * 0x100000001B3ull + off;
        if (std::memcmp(data + off, &v, 8) != 0) return false;
        if (std::memcmp(data + off + 8, base_.data() + off + 8, n - 8) != 0) return false;
      } else if (std::memcmp(data + off, base_.data() + off, n) != 0) {
        return false;
      }
    }
    return true;
  }

 private:
  std::vector<char> base_;
};

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_BENCH_UTIL_H_
