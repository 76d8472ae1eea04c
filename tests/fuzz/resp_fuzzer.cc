// Fuzzes shelf-resp's command parser (server/resp/resp_parser.h). The input
// is the byte stream a client sends, fed in pieces whose sizes come from
// the input's first bytes. Properties, beyond "does not crash": the commands
// and the error are the same whichever way the stream is split; no argument
// is longer than bulk_bytes_max and no command has more than args_max
// arguments; a parser in error stays in error and holds nothing.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include "server/resp/resp_parser.h"

namespace shelf::resp {
namespace {

void Check(bool ok, const char* what) {
  if (!ok) {
    std::fprintf(stderr, "resp_fuzzer: property violated: %s\n", what);
    std::abort();
  }
}

RespLimits Limits() {
  RespLimits l;
  l.args_max = 16;
  l.bulk_bytes_max = 4096;
  l.line_bytes_max = 256;
  return l;
}

struct Outcome {
  std::vector<std::vector<std::string>> commands;
  std::string error;
};

// Feeds `stream` in pieces: piece i is steps[i % steps.size()] bytes.
Outcome Parse(const std::string& stream, const std::vector<size_t>& steps) {
  RespLimits limits = Limits();
  RespParser p(limits);
  Outcome out;
  size_t at = 0, i = 0;
  while (at < stream.size() && out.error.empty()) {
    size_t n = std::min(steps[i++ % steps.size()], stream.size() - at);
    p.Feed(stream.data() + at, n);
    at += n;
    std::vector<std::string> args;
    for (;;) {
      RespParser::Result r = p.Next(&args, &out.error);
      if (r == RespParser::Result::kCommand) {
        Check(!args.empty(), "a command has a name");
        Check(args.size() <= limits.args_max, "at most args_max arguments");
        for (const std::string& a : args) {
          Check(a.size() <= limits.bulk_bytes_max, "no argument over bulk_bytes_max");
        }
        out.commands.push_back(args);
        continue;
      }
      if (r == RespParser::Result::kError) {
        Check(!out.error.empty(), "an error has a message");
        Check(p.buffered_bytes() == 0, "a parser in error holds nothing");
        std::string again;
        Check(p.Next(&args, &again) == RespParser::Result::kError, "errors are sticky");
      }
      break;
    }
  }
  return out;
}

}  // namespace
}  // namespace shelf::resp

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  using namespace shelf::resp;
  if (size < 3) return 0;
  std::vector<size_t> steps = {static_cast<size_t>(data[0] % 32) + 1,
                               static_cast<size_t>(data[1]) * 4 + 1};
  std::string stream(reinterpret_cast<const char*>(data + 2), size - 2);
  Outcome whole = Parse(stream, {stream.size()});
  Outcome split = Parse(stream, steps);
  Outcome bytes = Parse(stream, {1});
  Check(whole.commands == split.commands && whole.commands == bytes.commands,
        "the same commands however the stream is split");
  Check(whole.error == split.error && whole.error == bytes.error,
        "the same error however the stream is split");
  return 0;
}
