// Credentials files for tests that run a cluster with --credentials.
#ifndef SHELF_TESTING_CREDENTIALS_FILE_H_
#define SHELF_TESTING_CREDENTIALS_FILE_H_

#include <string>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "proto/shelf.grpc.pb.h"

namespace shelf {

// The secret of principal `name` in credentials text `text`; "" when the
// text names no such principal (or does not parse).
std::string SecretIn(absl::string_view text, absl::string_view name);

// Writes `text` as a credentials file (mode 0600, as the master demands)
// in a new temporary directory "<tmp>/<prefix>-XXXXXX". Sets *dir to that
// directory and returns the file's path; "" when it could not.
std::string WriteCredentialsFile(const std::string& prefix, const std::string& text,
                                 std::string* dir);

// Looks `key` up (no lease) through `master` under principal token
// `token`: its DRAM replica, and in *credential what a client presents to
// read it (the replica's read grant, then the key in the store's form).
// NOT_FOUND when the key or its DRAM replica is missing.
absl::StatusOr<v1::Replica> LocateDramReplica(v1::MasterService::Stub* master,
                                              const std::string& token, const std::string& key,
                                              std::string* credential);

}  // namespace shelf

#endif  // SHELF_TESTING_CREDENTIALS_FILE_H_
