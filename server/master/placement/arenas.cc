// Tenant arenas (docs/security.md, "Tenant arenas"): a store of arenas
// hands a same-host client whole arenas, so in a cluster of tenants each
// arena holds one tenant's blocks. An arena is given to a tenant with its
// first block and stays its tenant's while the node's registration (or the
// same store process) lasts.
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/log.h"
#include "server/master/master.h"

namespace shelf::master {

std::vector<uint32_t> Master::SegmentOrderLocked(const Node& n, absl::string_view key,
                                                 absl::Status* why) const {
  std::vector<uint32_t> order;
  const bool arenas = ArenasLocked(n);
  const absl::string_view tenant = KeyTenant(key);
  for (int pass = 0; pass < (arenas ? 2 : 1); ++pass) {
    for (uint32_t si = 0; si < n.segments.size(); ++si) {
      const Segment& seg = n.segments[si];
      if (!arenas || (pass == 0 && seg.bound && seg.tenant == tenant) ||
          (pass == 1 && !seg.bound)) {
        order.push_back(si);
      }
    }
  }
  if (order.empty()) {
    *why = absl::ResourceExhaustedError(
        absl::StrCat("every arena of store ", n.endpoint.node_id(), " belongs to another tenant"));
  }
  return order;
}

void Master::BindArenaLocked(const Node& n, Segment* seg, absl::string_view key) {
  if (!ArenasLocked(n) || seg->bound) return;
  seg->bound = true;
  seg->tenant = std::string(KeyTenant(key));
  SHELF_LOG(INFO) << "arena given to a tenant" << Kv("node", n.endpoint.node_id())
                  << Kv("arena", seg->id) << Kv("tenant", seg->tenant);
}

}  // namespace shelf::master
