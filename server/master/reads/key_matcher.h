// KeyMatcher: the pattern forms of ListKeys and RemoveMatching (described
// in shelf.proto): a Redis glob or a regular expression (RE2 syntax,
// searched anywhere in the key), within a tenant's scope.
//
// Both run in time linear in the key: a glob backtracks only to its last
// `*`, and RE2 runs automata, never backtracking, so no pattern can make a
// match take longer than O(|pattern| x |key|) (RE2 has no backreferences
// or lookaround for that reason). A regex compiles within kRegexMemoryMax
// bytes or is refused.
//
//   KeyMatcher m;
//   if (absl::Status s = m.Init("user:*", /*regex=*/false, ""); !s.ok()) ...
//   bool hit = m.Match("user:42");
//
// Match is const and thread-compatible.
#ifndef SHELF_SERVER_MASTER_READS_KEY_MATCHER_H_
#define SHELF_SERVER_MASTER_READS_KEY_MATCHER_H_

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"

namespace re2 {
class RE2;
}  // namespace re2

namespace shelf::master {

// The memory RE2 may use for one compiled regex (its program and lazily
// built DFA); a pattern whose program does not fit is refused, and a DFA
// that outgrows it falls back to RE2's NFA, still linear in the key.
inline constexpr int64_t kRegexMemoryMax = 1 << 20;

// Redis's glob: `*` any run, `?` one byte, `[...]` a set (`^` or `!` first
// negates, `a-z` a range), `\` escapes the next byte. The whole key must
// match. Backtracks only to the last `*`, so time is O(|pattern| * |key|).
bool GlobMatch(absl::string_view pattern, absl::string_view key);

// A compiled pattern: glob or regex; empty matches everything. With a
// scope, only keys that start with it match, and the pattern sees the key
// after it (a tenant's namespace: tenant_keys.h).
class KeyMatcher {
 public:
  KeyMatcher();
  ~KeyMatcher();
  KeyMatcher(const KeyMatcher&) = delete;
  KeyMatcher& operator=(const KeyMatcher&) = delete;

  // InvalidArgument: a pattern over kPatternBytesMax, a regex that does not
  // compile (or uses what RE2 lacks: backreferences, lookaround), or whose
  // program exceeds kRegexMemoryMax.
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
  std::unique_ptr<re2::RE2> re_;  // bytes as Latin-1: a key is any bytes
};

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_READS_KEY_MATCHER_H_
