#include "server/master/reads/key_matcher.h"

#include <re2/re2.h>

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "shelf/limits.h"

namespace shelf::master {

bool GlobMatch(absl::string_view p, absl::string_view k) {
  size_t pi = 0, ki = 0;
  size_t star_p = absl::string_view::npos, star_k = 0;
  while (ki < k.size()) {
    bool advanced = false;
    if (pi < p.size()) {
      char c = p[pi];
      if (c == '*') {
        star_p = pi++;
        star_k = ki;
        continue;
      }
      if (c == '?') {
        ++pi;
        ++ki;
        advanced = true;
      } else if (c == '[') {
        size_t j = pi + 1;
        bool negate = j < p.size() && (p[j] == '^' || p[j] == '!');
        if (negate) ++j;
        bool hit = false;
        bool first = true;
        while (j < p.size() && (p[j] != ']' || first)) {
          first = false;
          char lo = p[j];
          if (lo == '\\' && j + 1 < p.size()) lo = p[++j];
          char hi = lo;
          if (j + 2 < p.size() && p[j + 1] == '-' && p[j + 2] != ']') {
            hi = p[j + 2];
            if (hi == '\\' && j + 3 < p.size()) hi = p[++j + 2];
            j += 2;
          }
          unsigned char kc = static_cast<unsigned char>(k[ki]);
          if (static_cast<unsigned char>(lo) <= kc && kc <= static_cast<unsigned char>(hi)) {
            hit = true;
          }
          ++j;
        }
        // An unclosed `[` matches itself.
        if (j >= p.size()) {
          if (k[ki] == '[') {
            ++pi;
            ++ki;
            advanced = true;
          }
        } else if (hit != negate) {
          pi = j + 1;
          ++ki;
          advanced = true;
        }
      } else {
        if (c == '\\' && pi + 1 < p.size()) c = p[++pi];
        if (c == k[ki]) {
          ++pi;
          ++ki;
          advanced = true;
        }
      }
    }
    if (advanced) continue;
    if (star_p == absl::string_view::npos) return false;
    pi = star_p + 1;
    ki = ++star_k;
  }
  while (pi < p.size() && p[pi] == '*') ++pi;
  return pi == p.size();
}

KeyMatcher::KeyMatcher() = default;
KeyMatcher::~KeyMatcher() = default;

absl::Status KeyMatcher::Init(const std::string& pattern, bool regex, const std::string& scope) {
  scope_ = scope;
  if (pattern.size() > kPatternBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern of ", pattern.size(), " bytes exceeds the limit of ", kPatternBytesMax));
  }
  pattern_ = pattern;
  regex_ = regex && !pattern.empty();
  re_.reset();
  if (regex_) {
    RE2::Options options;
    options.set_encoding(RE2::Options::EncodingLatin1);  // keys are bytes, not UTF-8
    options.set_max_mem(kRegexMemoryMax);
    options.set_log_errors(false);
    auto re = std::make_unique<RE2>(pattern, options);
    if (!re->ok()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "bad regex: ", re->error(), " (RE2 syntax: no backreferences or lookaround; at most ",
          kRegexMemoryMax, " bytes compiled)"));
    }
    re_ = std::move(re);
  }
  return absl::OkStatus();
}

bool KeyMatcher::Match(absl::string_view key) const {
  if (!absl::ConsumePrefix(&key, scope_)) return false;
  if (pattern_.empty()) return true;
  if (!regex_) return GlobMatch(pattern_, key);
  return RE2::PartialMatch(re2::StringPiece(key.data(), key.size()), *re_);
}

}  // namespace shelf::master
