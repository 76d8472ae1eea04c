// Mode checks for files that hold credentials: the cluster secret, private
// keys, passwords. A credential other users of the machine can read is no
// longer a secret, so a daemon refuses such a file before it uses it.
//
// Accepted (the rule PostgreSQL applies to its key file):
//   - no permission at all for others, and
//   - no group permission, unless the file is owned by root and its group
//     may only read it (0640/0440 root:shelf, the systemd layout, and what
//     Kubernetes makes of a Secret mounted with defaultMode 0400 and an
//     fsGroup).
// Symbolic links are followed (Kubernetes mounts Secrets through them).
#ifndef SHELF_COMMON_SECRET_FILE_H_
#define SHELF_COMMON_SECRET_FILE_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shelf {

// OK when `path`'s mode and owner keep it private; else PERMISSION_DENIED
// naming `what` (e.g. "--secret-file"), the file, its mode and the fix.
// NOT_FOUND when it cannot be stat()ed.
absl::Status CheckPrivateFile(const std::string& path, const std::string& what);

// CheckPrivateFile, then the whole file.
absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what);

}  // namespace shelf

#endif  // SHELF_COMMON_SECRET_FILE_H_
