// Early-return helpers for absl::Status / absl::StatusOr.
#ifndef SHELF_COMMON_STATUS_MACROS_H_
#define SHELF_COMMON_STATUS_MACROS_H_

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define SHELF_RETURN_IF_ERROR(expr)                \
  do {                                             \
    ::absl::Status shelf_status_ = (expr);         \
    if (!shelf_status_.ok()) return shelf_status_; \
  } while (0)

#define SHELF_CONCAT_INNER(a, b) a##b
#define SHELF_CONCAT(a, b) SHELF_CONCAT_INNER(a, b)
#define SHELF_ASSIGN_OR_RETURN(lhs, expr) \
  SHELF_ASSIGN_OR_RETURN_IMPL(SHELF_CONCAT(shelf_statusor_, __LINE__), lhs, expr)
#define SHELF_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                                \
  if (!tmp.ok()) return tmp.status();               \
  lhs = std::move(*tmp)

#endif  // SHELF_COMMON_STATUS_MACROS_H_
