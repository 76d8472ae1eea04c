// A minimal JSON writer for the tools' --json output: objects, arrays,
// strings (escaped), numbers and booleans. Not a parser.
#ifndef SHELF_TOOLS_JSON_H_
#define SHELF_TOOLS_JSON_H_

#include <cstdint>
#include <cstdio>
#include <string>
#include <vector>

namespace shelf {

class Json {
 public:
  static std::string Quote(const std::string& s) {
    std::string out = "\"";
    for (unsigned char c : s) {
      switch (c) {
        case '"': out += "\\\""; break;
        case '\\': out += "\\\\"; break;
        case '\n': out += "\\n"; break;
        case '\t': out += "\\t"; break;
        case '\r': out += "\\r"; break;
        default:
          if (c < 0x20 || c >= 0x7f) {
            char buf[8];
            std::snprintf(buf, sizeof(buf), "\\u%04x", c);
            out += buf;
          } else {
            out += static_cast<char>(c);
          }
      }
    }
    return out + "\"";
  }
  // An object under construction: Add* append "key": value.
  class Object {
   public:
    Object& Add(const std::string& k, const std::string& v) { return Raw(k, Quote(v)); }
    Object& Add(const std::string& k, const char* v) { return Raw(k, Quote(v)); }
    Object& Add(const std::string& k, uint64_t v) { return Raw(k, std::to_string(v)); }
    Object& Add(const std::string& k, int64_t v) { return Raw(k, std::to_string(v)); }
    Object& Add(const std::string& k, int v) { return Raw(k, std::to_string(v)); }
    Object& Add(const std::string& k, double v) {
      char buf[64];
      std::snprintf(buf, sizeof(buf), "%.6g", v);
      return Raw(k, buf);
    }
    Object& Add(const std::string& k, bool v) { return Raw(k, v ? "true" : "false"); }
    Object& Raw(const std::string& k, const std::string& json) {
      parts_.push_back(Quote(k) + ": " + json);
      return *this;
    }
    std::string str() const {
      std::string out = "{";
      for (size_t i = 0; i < parts_.size(); ++i) out += (i ? ", " : "") + parts_[i];
      return out + "}";
    }

   private:
    std::vector<std::string> parts_;
  };
  static std::string Array(const std::vector<std::string>& items) {
    std::string out = "[";
    for (size_t i = 0; i < items.size(); ++i) out += (i ? ", " : "") + items[i];
    return out + "]";
  }
};

}  // namespace shelf

#endif  // SHELF_TOOLS_JSON_H_
