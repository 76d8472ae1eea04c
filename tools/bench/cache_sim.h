// Cache simulations the replay compares Shelf with, over block ids of a
// trace (each request a chain of 512-token blocks; a hit is the leading run
// of blocks present):
//
//   LruSim      a two-level LRU: DRAM, whose victims move to SSD, whose
//               victims are dropped (an exclusive hierarchy);
//   S3FifoSim   the same hierarchy with DRAM managed as S3-FIFO (Yang et
//               al., SOSP'23): new blocks enter a small probationary FIFO
//               and reach the main queue only if read again while there
//               (or soon after, through a ghost list of recent probation
//               victims); main evicts FIFO order, reinserting what was
//               read since it entered. Every DRAM victim moves to SSD.
//
// Capacities in blocks; an SSD capacity of 0 means DRAM only. They answer
// whether admitting blocks read once into DRAM pays (docs/storage.md,
// "Admission").
#ifndef SHELF_TOOLS_BENCH_CACHE_SIM_H_
#define SHELF_TOOLS_BENCH_CACHE_SIM_H_

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <iterator>
#include <list>
#include <unordered_map>
#include <vector>

namespace shelf::bench {

class LruSim {
 public:
  LruSim(uint64_t dram_blocks, uint64_t ssd_blocks) : cap_{dram_blocks, ssd_blocks} {}
  // Returns the number of leading ids present, then touches/inserts all.
  size_t Request(const std::vector<uint64_t>& ids) {
    size_t matched = 0;
    while (matched < ids.size() && where_.count(ids[matched])) ++matched;
    for (uint64_t id : ids) {
      auto it = where_.find(id);
      if (it != where_.end()) {
        Level& l = levels_[it->second.level];
        l.splice(l.end(), l, it->second.pos);
        continue;
      }
      Insert(0, id);
    }
    return matched;
  }

 private:
  using Level = std::list<uint64_t>;
  struct Where {
    int level;
    Level::iterator pos;
  };
  void Insert(int level, uint64_t id) {
    if (cap_[level] == 0) {
      if (level == 0 && cap_[1] > 0) Insert(1, id);
      return;
    }
    levels_[level].push_back(id);
    where_[id] = Where{level, std::prev(levels_[level].end())};
    if (levels_[level].size() > cap_[level]) {
      uint64_t victim = levels_[level].front();
      levels_[level].pop_front();
      where_.erase(victim);
      if (level == 0 && cap_[1] > 0) Insert(1, victim);
    }
  }
  uint64_t cap_[2];
  Level levels_[2];
  std::unordered_map<uint64_t, Where> where_;
};

class S3FifoSim {
 public:
  // `probation` is the small FIFO's share of DRAM (S3-FIFO's default 10%).
  S3FifoSim(uint64_t dram_blocks, uint64_t ssd_blocks, double probation = 0.1)
      : cap_{std::max<uint64_t>(
                 1, static_cast<uint64_t>(static_cast<double>(dram_blocks) * probation)),
             0, ssd_blocks} {
    cap_[kMain] = dram_blocks > cap_[kSmall] ? dram_blocks - cap_[kSmall] : 0;
  }

  size_t Request(const std::vector<uint64_t>& ids) {
    size_t matched = 0;
    while (matched < ids.size() && entries_.count(ids[matched])) ++matched;
    for (uint64_t id : ids) Touch(id);
    return matched;
  }

 private:
  enum Queue : uint8_t { kSmall, kMain, kSsd };
  using List = std::list<uint64_t>;
  struct Entry {
    Queue queue;
    uint8_t reads;  // since it entered its queue, at most 3
    List::iterator pos;
  };

  void Touch(uint64_t id) {
    auto it = entries_.find(id);
    if (it != entries_.end()) {
      Entry& e = it->second;
      if (e.queue == kSsd) {  // an SSD hit stays on SSD, as in LruSim
        lists_[kSsd].splice(lists_[kSsd].end(), lists_[kSsd], e.pos);
      } else {
        e.reads = static_cast<uint8_t>(std::min(3, e.reads + 1));
      }
      return;
    }
    auto g = ghosts_.find(id);
    if (g != ghosts_.end()) {  // read again soon after probation: admitted
      ghost_list_.erase(g->second);
      ghosts_.erase(g);
      Push(kMain, id, 0);
      return;
    }
    Push(kSmall, id, 0);
  }
  void Push(Queue q, uint64_t id, uint8_t reads) {
    if (cap_[q] == 0) {
      if (q != kSsd) Push(kSsd, id, 0);  // no room in DRAM: straight to SSD
      return;
    }
    lists_[q].push_back(id);
    entries_[id] = Entry{q, reads, std::prev(lists_[q].end())};
    while (lists_[q].size() > cap_[q]) Evict(q);
  }
  void Evict(Queue q) {
    uint64_t victim = lists_[q].front();
    lists_[q].pop_front();
    uint8_t reads = entries_.at(victim).reads;
    entries_.erase(victim);
    if (q == kSmall && reads > 0) {
      Push(kMain, victim, 0);
    } else if (q == kSmall) {
      // Read once: remembered as a ghost; its bytes move to SSD.
      ghost_list_.push_back(victim);
      ghosts_[victim] = std::prev(ghost_list_.end());
      if (ghost_list_.size() > cap_[kMain]) {
        ghosts_.erase(ghost_list_.front());
        ghost_list_.pop_front();
      }
      Push(kSsd, victim, 0);
    } else if (q == kMain && reads > 0) {  // once more round, one read spent
      lists_[kMain].push_back(victim);
      entries_[victim] =
          Entry{kMain, static_cast<uint8_t>(reads - 1), std::prev(lists_[kMain].end())};
    } else if (q == kMain) {
      Push(kSsd, victim, 0);
    }
  }

  uint64_t cap_[3];
  List lists_[3];
  std::unordered_map<uint64_t, Entry> entries_;
  List ghost_list_;
  std::unordered_map<uint64_t, List::iterator> ghosts_;
};

}  // namespace shelf::bench

#endif  // SHELF_TOOLS_BENCH_CACHE_SIM_H_
