#include "common/checksum.h"

#ifdef SHELF_XXH3_DISPATCH
// libxxhash's dispatching entry points (xxh_x86dispatch.h, which also
// renames the inline functions this file keeps using), and its version
// (XXH_versionNumber, which XXH_INLINE_ALL renames here to the inline one).
extern "C" {
XXH64_hash_t XXH3_64bits_dispatch(const void* input, size_t len);
XXH_errorcode XXH3_64bits_update_dispatch(XXH3_state_t* state, const void* input, size_t len);
unsigned LibraryXxhVersion(void) __asm__("XXH_versionNumber");
}
#endif

namespace shelf {
namespace {

#ifdef SHELF_XXH3_DISPATCH
// The streaming state is the struct the inline code resets and digests, and
// its layout is not part of the library's stable interface: the library's
// update runs on it only when the library is the version of the header this
// was built with (one upgraded without a rebuild would otherwise yield wrong
// checksums, read as corrupt blocks).
bool LibraryMatchesHeader() {
  static const bool same = LibraryXxhVersion() == XXH_VERSION_NUMBER;
  return same;
}
#endif

}  // namespace

uint64_t BlockChecksumLong(const void* data, size_t size) {
#ifdef SHELF_XXH3_DISPATCH
  return XXH3_64bits_dispatch(data, size);
#else
  return XXH3_64bits(data, size);
#endif
}

bool ChecksumDispatches() {
#ifdef SHELF_XXH3_DISPATCH
  return LibraryMatchesHeader();
#else
  return false;
#endif
}

void ChecksumStream::Update(const void* data, size_t size) {
#ifdef SHELF_XXH3_DISPATCH
  if (size >= kChecksumOutOfLineBytes && LibraryMatchesHeader()) {
    XXH3_64bits_update_dispatch(&state_, data, size);
    return;
  }
#endif
  XXH3_64bits_update(&state_, data, size);
}

}  // namespace shelf
