// The option helpers of libshelf's language bindings (binding_options.h).
#include "client/binding_options.h"

#include <string>
#include <vector>

#include "common/credentials.h"

namespace shelf {

std::vector<std::string> SplitMasters(const std::string& masters, const char* separators) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= masters.size()) {
    size_t comma = masters.find_first_of(separators, start);
    if (comma == std::string::npos) comma = masters.size();
    if (comma > start) out.push_back(masters.substr(start, comma - start));
    start = comma + 1;
  }
  return out;
}

bool PrincipalHasTenant(const ClientOptions& o, const std::string& tenant) {
  if (tenant == "default") return true;
  if (o.credentials_file.empty()) return false;
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(o.credentials_file);
  if (!entries.ok()) return false;
  for (const PrincipalEntry& e : *entries) {
    bool chosen = o.principal.empty() ? entries->size() == 1 : e.principal.name == o.principal;
    if (chosen) return e.principal.tenant == tenant;
  }
  return false;
}

}  // namespace shelf
