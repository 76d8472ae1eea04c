// Credentials files for tests that run a cluster with --credentials.
#ifndef SHELF_TESTING_CREDENTIALS_FILE_H_
#define SHELF_TESTING_CREDENTIALS_FILE_H_

#include <string>

#include "absl/strings/string_view.h"

namespace shelf {

// The secret of principal `name` in credentials text `text`; "" when the
// text names no such principal (or does not parse).
std::string SecretIn(absl::string_view text, absl::string_view name);

// Writes `text` as a credentials file (mode 0600, as the master demands)
// in a new temporary directory "<tmp>/<prefix>-XXXXXX". Sets *dir to that
// directory and returns the file's path; "" when it could not.
std::string WriteCredentialsFile(const std::string& prefix, const std::string& text,
                                 std::string* dir);

}  // namespace shelf

#endif  // SHELF_TESTING_CREDENTIALS_FILE_H_
