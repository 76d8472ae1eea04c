// FuzzInput: reads typed values off a fuzzer's byte string, front to back,
// answering zeros once the bytes run out (so every input is a valid
// program). Like LLVM's FuzzedDataProvider, but it builds with any
// compiler: the regression replays of the fuzzers run in the GCC suite.
//
//   FuzzInput in(data, size);
//   uint8_t op = in.U8();
//   std::string key = in.Bytes(in.U8() % 8);
#ifndef SHELF_TESTS_FUZZ_FUZZ_INPUT_H_
#define SHELF_TESTS_FUZZ_FUZZ_INPUT_H_

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <string>

namespace shelf::fuzz {

class FuzzInput {
 public:
  FuzzInput(const uint8_t* data, size_t size) : data_(data), size_(size) {}

  bool empty() const { return pos_ >= size_; }
  size_t left() const { return size_ - pos_; }

  uint8_t U8() { return pos_ < size_ ? data_[pos_++] : 0; }
  uint16_t U16() { return static_cast<uint16_t>(U8() | (U8() << 8)); }
  uint32_t U32() { return U16() | (static_cast<uint32_t>(U16()) << 16); }
  uint64_t U64() { return U32() | (static_cast<uint64_t>(U32()) << 32); }
  bool Bool() { return U8() & 1; }
  // One of `n` (n > 0) choices.
  size_t Pick(size_t n) { return U8() % n; }

  // Up to `n` bytes (fewer at the end of the input).
  std::string Bytes(size_t n) {
    n = n < left() ? n : left();
    std::string out(reinterpret_cast<const char*>(data_ + pos_), n);
    pos_ += n;
    return out;
  }
  std::string Rest() { return Bytes(left()); }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

}  // namespace shelf::fuzz

#endif  // SHELF_TESTS_FUZZ_FUZZ_INPUT_H_
