// SHELF_RDMA_CHECK: an invariant of the RDMA backend that must hold; when it
// does not, the process has a bug and stops here, in every build type (an
// expected failure, like a peer going away, is a Status instead).
//
//   SHELF_RDMA_CHECK(sq_used_ <= options_.sq_depth);
#ifndef SHELF_TRANSPORT_RDMA_CHECK_H_
#define SHELF_TRANSPORT_RDMA_CHECK_H_

#include <cstdio>
#include <cstdlib>

#define SHELF_RDMA_CHECK(cond)                                                               \
  do {                                                                                       \
    if (!(cond)) {                                                                           \
      std::fprintf(stderr, "%s:%d: RDMA invariant failed: %s\n", __FILE__, __LINE__, #cond); \
      std::abort();                                                                          \
    }                                                                                        \
  } while (0)

#endif  // SHELF_TRANSPORT_RDMA_CHECK_H_
