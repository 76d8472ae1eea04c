#include "common/flags.h"

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/units.h"

namespace shelf {

Flags::Flags(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::Add(const std::string& name, Flag flag) {
  if (flags_.count(name) == 0) order_.push_back(name);
  flags_[name] = std::move(flag);
}

void Flags::AddString(const std::string& name, std::string* value, const std::string& help) {
  Add(name, Flag{help, *value, false, false, [value](const std::string& v) {
                   *value = v;
                   return absl::OkStatus();
                 }});
}

void Flags::AddBool(const std::string& name, bool* value, const std::string& help) {
  Add(name, Flag{help, *value ? "true" : "false", true, false, [value](const std::string& v) {
                   std::string s = absl::AsciiStrToLower(v);
                   if (s == "true" || s == "1" || s == "yes" || s == "on") {
                     *value = true;
                   } else if (s == "false" || s == "0" || s == "no" || s == "off") {
                     *value = false;
                   } else {
                     return absl::InvalidArgumentError(
                         absl::StrCat("expected true or false, got '", v, "'"));
                   }
                   return absl::OkStatus();
                 }});
}

void Flags::AddInt(const std::string& name, int64_t* value, const std::string& help) {
  Add(name, Flag{help, std::to_string(*value), false, false, [value](const std::string& v) {
                   if (!absl::SimpleAtoi(v, value)) {
                     return absl::InvalidArgumentError(
                         absl::StrCat("expected an integer, got '", v, "'"));
                   }
                   return absl::OkStatus();
                 }});
}

void Flags::AddDouble(const std::string& name, double* value, const std::string& help) {
  Add(name,
      Flag{help, absl::StrCat(*value), false, false, [value](const std::string& v) {
             if (!absl::SimpleAtod(v, value)) {
               return absl::InvalidArgumentError(absl::StrCat("expected a number, got '", v, "'"));
             }
             return absl::OkStatus();
           }});
}

void Flags::AddSize(const std::string& name, uint64_t* bytes, const std::string& help) {
  Add(name, Flag{help, std::to_string(*bytes), false, false, [bytes](const std::string& v) {
                   absl::StatusOr<uint64_t> parsed = ParseSize(v);
                   if (!parsed.ok()) return parsed.status();
                   *bytes = *parsed;
                   return absl::OkStatus();
                 }});
}

void Flags::AddDurationMs(const std::string& name, uint64_t* ms, const std::string& help) {
  Add(name, Flag{help, absl::StrCat(*ms, "ms"), false, false, [ms](const std::string& v) {
                   absl::StatusOr<uint64_t> parsed = ParseDurationMs(v);
                   if (!parsed.ok()) return parsed.status();
                   *ms = *parsed;
                   return absl::OkStatus();
                 }});
}

absl::Status Flags::Apply(const std::string& name, const std::string& value) {
  auto it = flags_.find(name);
  if (it == flags_.end()) {
    return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
  }
  absl::Status s = it->second.apply(value);
  if (!s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("--", name, ": ", s.message()));
  }
  it->second.set = true;
  return absl::OkStatus();
}

bool Flags::WasSet(const std::string& name) const {
  auto it = flags_.find(name);
  return it != flags_.end() && it->second.set;
}

absl::Status Flags::ParseConfigText(const std::string& text, const std::string& origin) {
  std::istringstream in(text);
  std::string line;
  int line_no = 0;
  while (std::getline(in, line)) {
    ++line_no;
    size_t hash = line.find('#');
    if (hash != std::string::npos) line.resize(hash);
    absl::string_view body = absl::StripAsciiWhitespace(line);
    if (body.empty()) continue;
    size_t eq = body.find('=');
    if (eq == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ":", line_no, ": expected 'name = value', got '", body, "'"));
    }
    std::string name(absl::StripAsciiWhitespace(body.substr(0, eq)));
    std::string value(absl::StripAsciiWhitespace(body.substr(eq + 1)));
    if (value.size() >= 2 && value.front() == '"' && value.back() == '"') {
      value = value.substr(1, value.size() - 2);
    }
    if (name == "config" || flags_.count(name) == 0) {
      return absl::InvalidArgumentError(
          absl::StrCat(origin, ":", line_no, ": unknown key '", name, "'"));
    }
    if (absl::Status s = Apply(name, value); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(origin, ":", line_no, ": ", s.message()));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<std::vector<std::string>> Flags::Parse(int argc, const char* const* argv) {
  // First pass: find --config, so the file applies before the command line.
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") break;
    std::string path;
    if (arg == "--config" && i + 1 < argc) {
      path = argv[i + 1];
    } else if (arg.rfind("--config=", 0) == 0) {
      path = arg.substr(9);
    } else {
      continue;
    }
    std::ifstream file(path);
    if (!file) {
      return absl::NotFoundError(absl::StrCat("--config: cannot read '", path, "'"));
    }
    std::stringstream buf;
    buf << file.rdbuf();
    if (absl::Status s = ParseConfigText(buf.str(), path); !s.ok()) return s;
  }
  std::vector<std::string> positional;
  for (int i = 1; i < argc; ++i) {
    std::string arg = argv[i];
    if (arg == "--") {
      for (++i; i < argc; ++i) positional.push_back(argv[i]);
      break;
    }
    if (arg == "--help" || arg == "-h") {
      help_requested_ = true;
      return positional;
    }
    if (arg.size() < 3 || arg.rfind("--", 0) != 0) {
      positional.push_back(arg);
      continue;
    }
    std::string name = arg.substr(2);
    std::string value;
    bool has_value = false;
    if (size_t eq = name.find('='); eq != std::string::npos) {
      value = name.substr(eq + 1);
      name.resize(eq);
      has_value = true;
    }
    if (name == "config") {
      if (!has_value) ++i;  // already applied in the first pass
      continue;
    }
    auto it = flags_.find(name);
    if (it == flags_.end()) {
      return absl::InvalidArgumentError(absl::StrCat("unknown flag --", name));
    }
    if (!has_value) {
      if (it->second.is_bool) {
        value = "true";
      } else if (i + 1 < argc) {
        value = argv[++i];
      } else {
        return absl::InvalidArgumentError(absl::StrCat("--", name, " needs a value"));
      }
    }
    if (absl::Status s = Apply(name, value); !s.ok()) return s;
  }
  return positional;
}

std::vector<std::string> Flags::ParseOrExit(int argc, const char* const* argv) {
  absl::StatusOr<std::vector<std::string>> args = Parse(argc, argv);
  if (!args.ok()) {
    std::fprintf(stderr, "%s: %s\nRun '%s --help' for the flags.\n", program_.c_str(),
                 std::string(args.status().message()).c_str(), program_.c_str());
    std::exit(2);  // NOLINT(concurrency-mt-unsafe): flags are parsed before any thread starts
  }
  if (help_requested_) {
    std::fputs(Help().c_str(), stdout);
    std::exit(0);  // NOLINT(concurrency-mt-unsafe): as above
  }
  return *std::move(args);
}

std::string Flags::Help() const {
  std::string out = absl::StrCat(program_, ": ", summary_, "\n\nFlags:\n");
  for (const std::string& name : order_) {
    const Flag& f = flags_.at(name);
    std::string head = absl::StrCat("  --", name, f.is_bool ? "" : " VALUE");
    absl::StrAppend(&out, head, std::string(head.size() < 28 ? 28 - head.size() : 1, ' '), f.help,
                    f.default_text.empty() ? "" : absl::StrCat(" (default: ", f.default_text, ")"),
                    "\n");
  }
  absl::StrAppend(&out,
                  "  --config FILE               read 'name = value' lines; flags override them\n"
                  "  --help                      print this help\n");
  if (!epilog_.empty()) absl::StrAppend(&out, "\n", epilog_);
  return out;
}

}  // namespace shelf
