// What the master holds between the two halves of a put or a promotion,
// and the ranges it frees later (once the write grants that cover them
// have expired at every store).
#ifndef SHELF_SERVER_MASTER_PUTS_PENDING_H_
#define SHELF_SERVER_MASTER_PUTS_PENDING_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "proto/shelf.pb.h"
#include "server/master/index/object.h"

namespace shelf::master {

struct PendingPut {
  std::string key;
  uint64_t size = 0;
  uint64_t checksum = 0;
  std::string parent_key;
  std::string owner;                               // who may commit or abort it
  std::unique_ptr<v1::BlockEventInfo> event_info;  // as the put carried it
  uint64_t deadline_ms = 0;                        // NowMs
  std::vector<Replica> ranges;
  bool replace = false;          // PutOptions.replace: the commit replaces the key
  uint64_t soft_pin_ttl_ms = 0;  // PutOptions.soft_pin_ttl_ms: pinned at the commit
};
struct PendingPromote {
  std::string key;
  uint32_t node = 0;
  uint64_t incarnation = 0;
  uint32_t segment = 0;
  uint64_t offset = 0;
  uint64_t size = 0;
  uint64_t checksum = 0;
  uint64_t generation = 0;  // the commit promoted (a replace since: not attached)
  uint64_t deadline_ms = 0;
};
struct DeferredFree {
  uint64_t at_ms;
  uint32_t node;
  uint32_t segment;
  uint64_t offset;
  uint64_t size;
  // The lease (Master::GoneLease's id) of the object whose range this was
  // (removed, replaced, or still indexed with the copy moved to SSD or
  // dropped): once all its readers have given it back, this range is freed
  // before at_ms; 0: none.
  uint64_t gone_lease = 0;
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_PUTS_PENDING_H_
