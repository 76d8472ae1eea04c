#include "testing/test_paths.h"

#include <cstdlib>

namespace shelf {
namespace {

std::string FromEnvironment(const char* name, const char* built) {
  const char* value = std::getenv(name);
  return value != nullptr && *value != '\0' ? value : built;
}

}  // namespace

std::string TestBinDir() { return FromEnvironment("SHELF_BIN_DIR", SHELF_BUILD_BIN_DIR); }

std::string TestSourceDir() { return FromEnvironment("SHELF_SOURCE_DIR", SHELF_BUILD_SOURCE_DIR); }

}  // namespace shelf
