#include "common/secret_file.h"

#include <sys/stat.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/errno_text.h"

namespace shelf {

absl::Status CheckPrivateFile(const std::string& path, const std::string& what) {
  struct stat st;
  if (::stat(path.c_str(), &st) != 0) {
    return absl::NotFoundError(
        absl::StrCat("cannot read ", what, " '", path, "': ", ErrnoText(errno)));
  }
  if (!S_ISREG(st.st_mode)) {
    return absl::InvalidArgumentError(absl::StrCat(what, " '", path, "' is not a regular file"));
  }
  const mode_t perm = st.st_mode & 07777;
  const bool others = (perm & S_IRWXO) != 0;
  const bool root_group_read = st.st_uid == 0 && (perm & S_IRWXG) == S_IRGRP;
  const bool group = (perm & S_IRWXG) != 0 && !root_group_read;
  if (!others && !group) return absl::OkStatus();
  return absl::PermissionDeniedError(absl::StrFormat(
      "%s '%s' has mode %04o: it is accessible to %s; a credential must be private to its "
      "owner: run `chmod 600 %s` (or own it by root with mode 0640 and the daemon's group)",
      what, path, perm, others ? "other users" : "its group", path));
}

absl::StatusOr<std::string> ReadPrivateFile(const std::string& path, const std::string& what) {
  if (absl::Status s = CheckPrivateFile(path, what); !s.ok()) return s;
  std::ifstream f(path, std::ios::binary);
  if (!f) return absl::NotFoundError(absl::StrCat("cannot read ", what, " '", path, "'"));
  std::stringstream buf;
  buf << f.rdbuf();
  return buf.str();
}

}  // namespace shelf
