// Where a test finds this build's binaries and the source tree.
//
// The environment's SHELF_BIN_DIR and SHELF_SOURCE_DIR (CTest sets both for
// every test), else the folders of the build the test belongs to. Those are
// compiled into one file, test_paths.cc, rather than into every test: a
// test's object then does not depend on where the tree was cloned, and
// ccache serves it to any clone.

#ifndef SHELF_TESTING_TEST_PATHS_H_
#define SHELF_TESTING_TEST_PATHS_H_

#include <string>

namespace shelf {

// The folder holding shelf-master, shelf-store and the other binaries.
std::string TestBinDir();

// The root of the source tree (docs/, tests/data/, ...).
std::string TestSourceDir();

}  // namespace shelf

#endif  // SHELF_TESTING_TEST_PATHS_H_
