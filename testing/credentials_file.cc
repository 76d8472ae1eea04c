#include "testing/credentials_file.h"

#include <stdlib.h>
#include <sys/stat.h>

#include <filesystem>
#include <fstream>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/credentials.h"
#include "common/rpc.h"

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

absl::StatusOr<v1::Replica> LocateDramReplica(v1::MasterService::Stub* master,
                                              const std::string& token, const std::string& key,
                                              std::string* credential) {
  grpc::ClientContext ctx;
  PrepareContext(&ctx, token, 20000);
  v1::LookupRequest req;
  req.add_keys(key);
  req.set_no_lease(true);
  v1::LookupResponse resp;
  if (absl::Status s = FromGrpc(master->Lookup(&ctx, req, &resp)); !s.ok()) return s;
  if (resp.objects_size() != 1 || !resp.objects(0).found()) {
    return absl::NotFoundError(absl::StrCat(key, " not found"));
  }
  const v1::ObjectLocation& loc = resp.objects(0);
  for (const v1::Replica& r : loc.replicas()) {
    if (r.tier() != v1::TIER_DRAM) continue;
    *credential = absl::StrCat(r.read_grant(), loc.store_key().empty() ? key : loc.store_key());
    return r;
  }
  return absl::NotFoundError(absl::StrCat(key, " has no DRAM replica"));
}

}  // namespace shelf
