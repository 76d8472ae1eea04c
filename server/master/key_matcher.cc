#include "server/master/key_matcher.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "shelf/limits.h"

namespace shelf {

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

absl::Status KeyMatcher::Init(const std::string& pattern, bool regex, const std::string& scope) {
  scope_ = scope;
  if (pattern.size() > kPatternBytesMax) {
    return absl::InvalidArgumentError(absl::StrCat(
        "pattern of ", pattern.size(), " bytes exceeds the limit of ", kPatternBytesMax));
  }
  pattern_ = pattern;
  regex_ = regex && !pattern.empty();
  if (regex_) {
    try {
      re_ = std::regex(pattern, std::regex::ECMAScript | std::regex::optimize);
    } catch (const std::regex_error& e) {
      return absl::InvalidArgumentError(absl::StrCat("bad regex: ", e.what()));
    }
  }
  return absl::OkStatus();
}

bool KeyMatcher::Match(absl::string_view key) const {
  if (!absl::ConsumePrefix(&key, scope_)) return false;
  if (pattern_.empty()) return true;
  if (!regex_) return GlobMatch(pattern_, key);
  try {
    return std::regex_search(key.begin(), key.end(), re_);
  } catch (const std::regex_error&) {
    return false;  // too complex for this key: not a match
  }
}

}  // namespace shelf
