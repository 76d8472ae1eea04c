// Replays a fuzzer's committed corpus (tests/fuzz/corpus/<fuzzer>/) in the
// ordinary test suite, so every input that once crashed stays a regression
// test, plus a few thousand inputs from a fixed seed as a smoke run. The
// fuzzer itself (LLVMFuzzerTestOneInput) is linked in; SHELF_FUZZ_CORPUS
// names its folder.
//
// Inputs named `known-bug-*` reproduce bugs not fixed yet: they run only in
// the DISABLED_ test (run it with --gtest_also_run_disabled_tests), and
// the fuzz runs leave them out of their seeds (tests/fuzz/run_short.sh).
#include <gtest/gtest.h>
#include <stdlib.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);

namespace shelf {
namespace {

std::vector<std::filesystem::path> CorpusFiles(bool known_bugs) {
  std::vector<std::filesystem::path> files;
  std::error_code ec;
  for (const auto& e : std::filesystem::directory_iterator(SHELF_FUZZ_CORPUS, ec)) {
    if (!e.is_regular_file()) continue;
    bool bug = e.path().filename().string().rfind("known-bug-", 0) == 0;
    if (bug == known_bugs) files.push_back(e.path());
  }
  std::sort(files.begin(), files.end());
  return files;
}

void Replay(const std::filesystem::path& path) {
  std::ifstream f(path, std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  SCOPED_TRACE(path.string());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

TEST(FuzzReplay, CommittedCorpus) {
  std::vector<std::filesystem::path> files = CorpusFiles(false);
  EXPECT_FALSE(files.empty()) << "no corpus in " << SHELF_FUZZ_CORPUS;
  for (const auto& p : files) Replay(p);
}

TEST(FuzzReplay, SeededRandomInputs) {
  std::mt19937_64 rng(20240601);
  for (int i = 0; i < 2000; ++i) {
    std::string bytes(rng() % 512, '\0');
    for (char& c : bytes) c = static_cast<char>(rng());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
  }
}

TEST(FuzzReplay, DISABLED_KnownBugs) {
  // The fuzzers steer around reported bugs unless told not to.
  // NOLINTNEXTLINE(concurrency-mt-unsafe): no other thread runs between inputs
  setenv("SHELF_FUZZ_KNOWN_BUGS", "1", 1);
  for (const auto& p : CorpusFiles(true)) Replay(p);
}

}  // namespace
}  // namespace shelf
