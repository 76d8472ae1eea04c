// soak_load: the mixed load of tests/soak/soak.sh. Threads put, get
// (verified byte for byte against the writer's bytes, which derive from
// the key), prefix-match and remove blocks over a bounded key space, for a
// given time, through the client library. Prints one line of counts per
// interval; exits 1 if a get ever answered wrong bytes.
//
//   soak_load --master HOST:PORT [--threads 4] [--seconds 300] [--keys 4000]
//             [--shm=false]  (TCP only)
#include <atomic>
#include <cstdio>
#include <random>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/clock.h"
#include "common/flags.h"
#include "shelf/client.h"

namespace shelf {
namespace {

std::string Bytes(uint64_t key_index, size_t n) {
  std::string s(n, '\0');
  std::mt19937_64 rng(key_index * 7919 + 17);
  for (size_t i = 0; i + 8 <= n; i += 8) {
    uint64_t v = rng();
    std::memcpy(&s[i], &v, 8);
  }
  return s;
}

size_t SizeOf(uint64_t key_index) { return 4096 + (key_index * 2654435761u) % (256 << 10); }

struct Counts {
  std::atomic<uint64_t> puts{0}, put_errors{0}, gets{0}, hits{0}, misses{0}, get_errors{0},
      wrong{0}, removes{0}, matches{0};
  std::atomic<uint64_t> by_code[17] = {};  // failed gets and puts by status code
};

int Main(int argc, char** argv) {
  std::string master;
  int64_t threads = 4, seconds = 300, keys = 4000, interval = 10;
  bool shm = true;
  Flags flags("soak_load", "mixed, verified load for soak runs");
  flags.AddString("master", &master, "HOST:PORT of the master");
  flags.AddInt("threads", &threads, "worker threads");
  flags.AddInt("seconds", &seconds, "how long to run");
  flags.AddInt("keys", &keys, "size of the key space");
  flags.AddInt("interval", &interval, "seconds between progress lines");
  flags.AddBool("shm", &shm, "use shared memory with same-host stores");
  flags.ParseOrExit(argc, argv);
  ClientOptions co;
  co.masters = {master};
  co.timeout_ms = 5000;
  co.allow_shm = shm;
  std::unique_ptr<Client> client;
  Status s = Client::Open(co, &client);
  if (!s.ok()) {
    std::fprintf(stderr, "soak_load: %s\n", s.ToString().c_str());
    return 2;
  }
  Counts c;
  const uint64_t until = MonoMs() + seconds * 1000;
  std::vector<std::thread> pool;
  pool.reserve(threads);
  for (int t = 0; t < threads; ++t) {
    pool.emplace_back([&, t] {
      std::mt19937_64 rng(t + 1);
      while (MonoMs() < until) {
        uint64_t k = rng() % keys;
        std::string key = absl::StrCat("soak-", k);
        uint32_t op = rng() % 100;
        if (op < 35) {
          std::string data = Bytes(k, SizeOf(k));
          PutOptions po;
          po.replicas = 1 + rng() % 2;
          po.best_effort = true;
          Status st = client->Put(key, data.data(), data.size(), po);
          (st.ok() ? c.puts : c.put_errors).fetch_add(1);
          if (!st.ok()) c.by_code[static_cast<int>(st.code()) % 17].fetch_add(1);
        } else if (op < 90) {
          std::string got;
          Status st = client->Get(key, &got);
          c.gets.fetch_add(1);
          if (st.ok()) {
            c.hits.fetch_add(1);
            if (got != Bytes(k, SizeOf(k))) c.wrong.fetch_add(1);
          } else if (st.code() == StatusCode::kNotFound) {
            c.misses.fetch_add(1);
          } else {
            c.get_errors.fetch_add(1);
            c.by_code[static_cast<int>(st.code()) % 17].fetch_add(1);
          }
        } else if (op < 97) {
          std::vector<std::string> chain;
          for (uint64_t i = 0; i < 8; ++i) chain.push_back(absl::StrCat("soak-", (k + i) % keys));
          size_t matched = 0;
          if (client->MatchPrefix(chain, &matched).ok()) c.matches.fetch_add(1);
        } else {
          if (client->Remove(key).ok()) c.removes.fetch_add(1);
        }
      }
    });
  }
  uint64_t start = MonoMs();
  while (MonoMs() < until) {
    std::this_thread::sleep_for(std::chrono::seconds(interval));
    std::printf(
        "soak_load t=%llus puts=%llu put_errors=%llu gets=%llu hits=%llu misses=%llu "
        "get_errors=%llu wrong=%llu removes=%llu matches=%llu\n",
        static_cast<unsigned long long>((MonoMs() - start) / 1000),
        static_cast<unsigned long long>(c.puts.load()),
        static_cast<unsigned long long>(c.put_errors.load()),
        static_cast<unsigned long long>(c.gets.load()),
        static_cast<unsigned long long>(c.hits.load()),
        static_cast<unsigned long long>(c.misses.load()),
        static_cast<unsigned long long>(c.get_errors.load()),
        static_cast<unsigned long long>(c.wrong.load()),
        static_cast<unsigned long long>(c.removes.load()),
        static_cast<unsigned long long>(c.matches.load()));
    std::fflush(stdout);
  }
  for (std::thread& th : pool) th.join();
  std::printf("soak_load errors by code:");
  for (int code = 1; code < 17; ++code) {
    if (c.by_code[code].load() != 0) {
      std::printf(" %s=%llu", StatusCodeName(static_cast<StatusCode>(code)),
                  static_cast<unsigned long long>(c.by_code[code].load()));
    }
  }
  std::printf("\n");
  return c.wrong.load() == 0 ? 0 : 1;
}

}  // namespace
}  // namespace shelf

int main(int argc, char** argv) { return shelf::Main(argc, argv); }
