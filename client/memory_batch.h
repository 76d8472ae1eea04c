// BatchGetIntoMemory: a batch read straight into caller memory that is not
// registered (the C API's shelf_batch_get_into, Python's batch_get_into).
// Each target is registered for the length of the call, so the blocks move
// zero-copy and in parallel, exactly as Client::BatchGetInto. Internal.
#ifndef SHELF_CLIENT_MEMORY_BATCH_H_
#define SHELF_CLIENT_MEMORY_BATCH_H_

#include <cstddef>
#include <string>
#include <vector>

#include "shelf/client.h"

namespace shelf {

// Reads keys[i] into [targets[i], targets[i] + capacities[i]). The return
// and `statuses` are as Client::BatchGetInto's; a target that cannot be
// registered (null, capacity 0) fails its item with INVALID_ARGUMENT.
// REQUIRES: the three vectors have one entry per item; sizes may be null.
inline Status BatchGetIntoMemory(Client* client, const std::vector<std::string>& keys,
                                 const std::vector<void*>& targets,
                                 const std::vector<size_t>& capacities, Deadline deadline,
                                 std::vector<Status>* statuses, std::vector<size_t>* sizes) {
  std::vector<GetIntoItem> items(keys.size());
  std::vector<Status> registered(keys.size());
  for (size_t i = 0; i < keys.size(); ++i) {
    items[i].key = keys[i];
    items[i].capacity = capacities[i];
    registered[i] = client->RegisterBuffer(targets[i], capacities[i], &items[i].buffer);
  }
  Status s = client->BatchGetInto(items, statuses, sizes, deadline);
  for (size_t i = 0; i < keys.size(); ++i) {
    if (items[i].buffer.valid()) client->UnregisterBuffer(items[i].buffer);
    // A target that could not be registered: its own error, not "handle 0".
    if (s.ok() && !registered[i].ok()) (*statuses)[i] = registered[i];
  }
  return s;
}

}  // namespace shelf

#endif  // SHELF_CLIENT_MEMORY_BATCH_H_
