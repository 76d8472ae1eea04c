// shelf::Status: the SDK's error type. Codes are the canonical gRPC / Abseil
// codes with the same numbers, so a status from the master passes through
// unchanged. The public headers use no third-party types, so an engine
// builds against libshelf with nothing but these headers.
//
//   shelf::Status s = client->Get(key, &bytes);
//   if (s.code() == shelf::StatusCode::kNotFound) { /* compute it */ }
#ifndef SHELF_CLIENT_STATUS_H_
#define SHELF_CLIENT_STATUS_H_

#include <string>
#include <utility>

namespace shelf {

enum class StatusCode : int {
  kOk = 0,
  kCancelled = 1,
  kUnknown = 2,
  kInvalidArgument = 3,
  kDeadlineExceeded = 4,
  kNotFound = 5,
  kAlreadyExists = 6,
  kPermissionDenied = 7,
  kResourceExhausted = 8,
  kFailedPrecondition = 9,
  kAborted = 10,
  kOutOfRange = 11,
  kUnimplemented = 12,
  kInternal = 13,
  kUnavailable = 14,
  kDataLoss = 15,
  kUnauthenticated = 16,
};

// Returns "NOT_FOUND" etc.
const char* StatusCodeName(StatusCode code);

class Status {
 public:
  Status() = default;
  Status(StatusCode code, std::string message) : code_(code), message_(std::move(message)) {}
  static Status Ok() { return Status(); }

  bool ok() const { return code_ == StatusCode::kOk; }
  StatusCode code() const { return code_; }
  const std::string& message() const { return message_; }
  // "NOT_FOUND: no such key", or "OK".
  std::string ToString() const;

 private:
  StatusCode code_ = StatusCode::kOk;
  std::string message_;
};

}  // namespace shelf

#endif  // SHELF_CLIENT_STATUS_H_
