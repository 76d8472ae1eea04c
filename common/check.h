// SHELF_CHECK: an invariant that must hold. When it does not, the process has
// a bug: it prints the file, line, condition and any streamed context to
// stderr and aborts, in every build type (unlike assert(), which NDEBUG
// removes from release builds). An expected failure (a peer gone, a disk
// full, bad input from the network) is a Status instead, handled.
//
//   SHELF_CHECK(sq_used_ <= options_.sq_depth);
//   SHELF_CHECK(s.ok()) << "freeing " << offset << "+" << size << ": " << s;
//
// The streamed context is evaluated only when the check fails.
#ifndef SHELF_COMMON_CHECK_H_
#define SHELF_COMMON_CHECK_H_

#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include "absl/base/optimization.h"

namespace shelf::internal_check {

// Collects the message of a failed check; its destructor prints it and
// aborts, so the statement that built it never returns.
class CheckFailure {
 public:
  CheckFailure(const char* file, int line, const char* condition) {
    stream_ << file << ":" << line << ": CHECK failed: " << condition;
  }
  CheckFailure(const CheckFailure&) = delete;
  CheckFailure& operator=(const CheckFailure&) = delete;
  [[noreturn]] ~CheckFailure() {
    std::string text = stream_.str();
    if (text.size() == context_at_) text.resize(context_at_ - 2);  // no context: drop ": "
    text += "\n";
    std::fwrite(text.data(), 1, text.size(), stderr);
    std::fflush(stderr);
    std::abort();
  }
  // Context after the condition: `SHELF_CHECK(x) << "what"` prints
  // "CHECK failed: x: what".
  std::ostream& stream() {
    stream_ << ": ";
    context_at_ = stream_.str().size();
    return stream_;
  }

 private:
  std::ostringstream stream_;
  size_t context_at_ = 0;
};

}  // namespace shelf::internal_check

// A `while` so that `<< context` binds to the failure object and the whole
// macro is one statement (safe in an unbraced if/else).
#define SHELF_CHECK(cond)             \
  while (ABSL_PREDICT_FALSE(!(cond))) \
  ::shelf::internal_check::CheckFailure(__FILE__, __LINE__, #cond).stream()

#endif  // SHELF_COMMON_CHECK_H_
