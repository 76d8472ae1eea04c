// KeyMatcher: the pattern forms of ListKeys and RemoveMatching (described
// in shelf.proto): a Redis glob or an ECMAScript regex, within a tenant's
// scope.
//
//   KeyMatcher m;
//   if (absl::Status s = m.Init("user:*", /*regex=*/false, ""); !s.ok()) ...
//   bool hit = m.Match("user:42");
//
// Match is const and thread-compatible.
#ifndef SHELF_SERVER_MASTER_KEY_MATCHER_H_
#define SHELF_SERVER_MASTER_KEY_MATCHER_H_

#include <regex>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace shelf {

// Redis's glob: `*` any run, `?` one byte, `[...]` a set (`^` or `!` first
// negates, `a-z` a range), `\` escapes the next byte. The whole key must
// match. Backtracks only to the last `*`, so time is O(|pattern| * |key|).
bool GlobMatch(absl::string_view pattern, absl::string_view key);

// A compiled pattern: glob or regex; empty matches everything. With a
// scope, only keys that start with it match, and the pattern sees the key
// after it (a tenant's namespace: tenant_keys.h).
class KeyMatcher {
 public:
  // InvalidArgument: a pattern over kPatternBytesMax, a regex that does not
  // compile.
  absl::Status Init(const std::string& pattern, bool regex, const std::string& scope);
  bool Match(absl::string_view key) const;
  // Every key (no pattern, no scope): a flush.
  bool MatchesAll() const { return pattern_.empty() && scope_.empty(); }
  // The same pattern, form and scope.
  bool SameAs(const KeyMatcher& o) const {
    return pattern_ == o.pattern_ && regex_ == o.regex_ && scope_ == o.scope_;
  }

 private:
  std::string scope_;
  std::string pattern_;
  bool regex_ = false;
  std::regex re_;
};

}  // namespace shelf

#endif  // SHELF_SERVER_MASTER_KEY_MATCHER_H_
