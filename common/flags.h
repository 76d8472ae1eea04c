// Command-line flags shared by every Shelf binary, with an optional config
// file. A flag is `--name VALUE` or `--name=VALUE`; a bool flag is `--name`
// or `--name=true|false`. `--config FILE` reads `name = value` lines first
// (`#` starts a comment); flags on the command line override the file.
// Sizes accept "512MiB", durations "500ms" (common/units.h).
//
//   shelf::Flags flags("shelf-master", "Runs the metadata master.");
//   std::string listen = "127.0.0.1:7000";
//   flags.AddString("listen", &listen, "HOST:PORT to serve gRPC on");
//   auto args = flags.ParseOrExit(argc, argv);   // --help prints and exits 0
//
// Thread-compatible: use from one thread at start-up.
#ifndef SHELF_COMMON_FLAGS_H_
#define SHELF_COMMON_FLAGS_H_

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace shelf {

class Flags {
 public:
  Flags(std::string program, std::string summary);

  // Each Add* binds a flag to a variable whose current value is the default.
  void AddString(const std::string& name, std::string* value, const std::string& help);
  void AddBool(const std::string& name, bool* value, const std::string& help);
  void AddInt(const std::string& name, int64_t* value, const std::string& help);
  void AddDouble(const std::string& name, double* value, const std::string& help);
  void AddSize(const std::string& name, uint64_t* bytes, const std::string& help);
  void AddDurationMs(const std::string& name, uint64_t* ms, const std::string& help);

  // Parses argv[1..]. Returns the positional arguments in order, or
  // INVALID_ARGUMENT naming the flag (and file:line for config files).
  // Sets help_requested() on --help / -h and stops.
  absl::StatusOr<std::vector<std::string>> Parse(int argc, const char* const* argv);

  // Parse, and on --help print Help() and exit(0); on error print the error
  // and a hint to stderr and exit(2).
  std::vector<std::string> ParseOrExit(int argc, const char* const* argv);

  // Applies `name = value` lines. `origin` names the source in errors.
  absl::Status ParseConfigText(const std::string& text, const std::string& origin);

  bool help_requested() const { return help_requested_; }
  // Whether the flag was set by the command line or config file.
  bool WasSet(const std::string& name) const;
  std::string Help() const;
  // Extra text appended to --help (e.g. a list of subcommands).
  void set_epilog(std::string epilog) { epilog_ = std::move(epilog); }

 private:
  struct Flag {
    std::string help;
    std::string default_text;
    bool is_bool = false;
    bool set = false;
    std::function<absl::Status(const std::string&)> apply;
  };
  void Add(const std::string& name, Flag flag);
  absl::Status Apply(const std::string& name, const std::string& value);

  std::string program_;
  std::string summary_;
  std::string epilog_;
  std::map<std::string, Flag> flags_;
  std::vector<std::string> order_;
  bool help_requested_ = false;
};

}  // namespace shelf

#endif  // SHELF_COMMON_FLAGS_H_
