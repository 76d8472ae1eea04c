// libshelf.so's own translation unit: the library is shelf_client whole
// (client/CMakeLists.txt), exporting the C API of shelf/shelf.h. This file
// checks, at compile time, that the entry points a run-time binding looks
// up first keep their C signatures.
#include <type_traits>

#include "shelf/shelf.h"

static_assert(
    std::is_same_v<decltype(&shelf_client_open), int (*)(const shelf_options_t*, shelf_client_t**)>,
    "shelf_client_open's signature is part of the ABI");
static_assert(std::is_same_v<decltype(&shelf_options_set),
                             int (*)(shelf_options_t*, const char*, const char*)>,
              "shelf_options_set's signature is part of the ABI");
