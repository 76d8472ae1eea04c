// JSON for everything Shelf writes or reads as text: shelfctl --json, the
// daemons' /health, the benchmarks' JSON lines, `shelfctl plan --json`, the
// key vectors and the request traces. One library (nlohmann-json, Debian's
// nlohmann-json3-dev) does the quoting and parsing; this header adds the
// two rules the project needs on top of it:
//
//   * Writing never throws. Strings that are not valid UTF-8 (node ids or
//     labels from a misbehaving peer) come out with U+FFFD in place of the
//     bad bytes; NaN and infinities come out as null.
//   * Keys are arbitrary bytes, so a key field `key` carries the key as
//     text (bad bytes replaced, as above) and `key_hex` carries its exact
//     bytes in lowercase hex. Scripts that need the bytes read `key_hex`.
//
//   Json o = Json::object();
//   o["size"] = 4096;
//   AddBytesField(&o, "key", key);   // "key": "...", "key_hex": "..."
//   std::printf("%s\n", JsonDump(o).c_str());
//
// Json keeps fields in insertion order, so output reads in the order the
// code writes it.
#ifndef SHELF_COMMON_JSON_H_
#define SHELF_COMMON_JSON_H_

#include <string>

#include "absl/strings/escaping.h"
#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"

namespace shelf {

using Json = nlohmann::ordered_json;

// One line of compact JSON. Never throws (see the header comment).
inline std::string JsonDump(const Json& j) {
  return j.dump(-1, ' ', /*ensure_ascii=*/false, Json::error_handler_t::replace);
}

// Parses `text`; a value that is_discarded() when `text` is not JSON. Never
// throws.
inline Json JsonParse(absl::string_view text) {
  return Json::parse(text.begin(), text.end(), /*cb=*/nullptr, /*allow_exceptions=*/false);
}

// Sets obj[name] to `bytes` as text and obj[name + "_hex"] to its hex.
inline void AddBytesField(Json* obj, const std::string& name, absl::string_view bytes) {
  (*obj)[name] = std::string(bytes);
  (*obj)[name + "_hex"] = absl::BytesToHexString(bytes);
}

}  // namespace shelf

#endif  // SHELF_COMMON_JSON_H_
