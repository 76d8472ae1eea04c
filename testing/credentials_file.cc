#include "testing/credentials_file.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/status/statusor.h"
#include "common/credentials.h"

namespace shelf {

std::string SecretIn(absl::string_view text, absl::string_view name) {
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ParseCredentials(text, "test");
  if (!entries.ok()) return "";
  for (const PrincipalEntry& e : *entries) {
    if (e.principal.name == name) return e.secret;
  }
  return "";
}

std::string WriteCredentialsFile(const std::string& prefix, const std::string& text,
                                 std::string* dir) {
  std::string tmpl = (std::filesystem::temp_directory_path() / (prefix + "-XXXXXX")).string();
  if (mkdtemp(tmpl.data()) == nullptr) return "";
  *dir = tmpl;
  std::string path = tmpl + "/credentials";
  {
    std::ofstream out(path);
    out << text;
    if (!out) return "";
  }
  if (::chmod(path.c_str(), 0600) != 0) return "";
  return path;
}

}  // namespace shelf
