// FromAbsl: an absl::Status (the form libshelf's internals return) as the
// SDK's shelf::Status; the codes are the same. Internal to libshelf and its
// bindings.
#ifndef SHELF_CLIENT_ABSL_STATUS_H_
#define SHELF_CLIENT_ABSL_STATUS_H_

#include "absl/status/status.h"
#include "shelf/status.h"

namespace shelf {

Status FromAbsl(const absl::Status& s);

}  // namespace shelf

#endif  // SHELF_CLIENT_ABSL_STATUS_H_
