#include "common/checksum.h"

#ifdef SHELF_XXH3_DISPATCH
// libxxhash's dispatching entry points (xxh_x86dispatch.h, which also
// renames the inline functions this file keeps using). The state is the
// same struct the inline code resets and digests: one header, one version.
extern "C" {
XXH64_hash_t XXH3_64bits_dispatch(const void* input, size_t len);
XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t* state, const void* input, size_t len);
}
#endif

namespace shelf {

uint64_t BlockChecksumLong(const void* data, size_t size) {
#ifdef SHELF_XXH3_DISPATCH
  return XXH3_64bits_dispatch(data, size);
#else
  return XXH3_64bits(data, size);
#endif
}

bool ChecksumDispatches() {
#ifdef SHELF_XXH3_DISPATCH
  return true;
#else
  return false;
#endif
}

void ChecksumStream::Update(const void* data, size_t size) {
#ifdef SHELF_XXH3_DISPATCH
  if (size >= kChecksumOutOfLineBytes) {
    XXH3_64bits_update_dispatch(&state_, data, size);
    return;
  }
#endif
  XXH3_64bits_update(&state_, data, size);
}

}  // namespace shelf
