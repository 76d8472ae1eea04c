#include "server/master/quotas/tenant_keys.h"

#include "absl/strings/str_cat.h"

namespace shelf::master {

std::string TenantScope(const Principal& p) {
  if (p.tenant.empty()) return std::string();
  return absl::StrCat(p.tenant, std::string(1, kTenantSeparator));
}

absl::StatusOr<std::string> KeptKey(const Principal& p, const std::string& key, bool write) {
  if (p.tenant.empty()) return key;
  if (key.empty() || key[0] != '@') return absl::StrCat(TenantScope(p), key);
  size_t sep = key.find(kTenantSeparator);
  std::string tenant = sep == std::string::npos ? std::string() : key.substr(1, sep - 1);
  if (!ValidTenantName(tenant)) {
    return absl::InvalidArgumentError(
        "a key that starts with '@' names a tenant's key: @TENANT/KEY (write your own key "
        "that starts with '@' as @YOUR_TENANT/@...)");
  }
  if (tenant != p.tenant && (write || !p.MayRead(tenant))) {
    return absl::PermissionDeniedError(
        absl::StrCat("principal '", p.name, "' of tenant '", p.tenant, "' may not ",
                     write ? "write" : "read", " keys of tenant '", tenant, "'"));
  }
  return key.substr(1);
}

std::string CallerKey(const Principal& p, const std::string& kept) {
  if (p.tenant.empty()) return kept;
  const std::string scope = TenantScope(p);
  if (kept.compare(0, scope.size(), scope) == 0 &&
      (kept.size() == scope.size() || kept[scope.size()] != '@')) {
    return kept.substr(scope.size());
  }
  return absl::StrCat("@", kept);
}

absl::Status ToKept(const Principal& p, v1::PutStartRequest* req) {
  if (p.tenant.empty()) return absl::OkStatus();
  absl::StatusOr<std::string> key = KeptKey(p, req->key(), /*write=*/true);
  if (!key.ok()) return key.status();
  req->set_key(*std::move(key));
  if (!req->parent_key().empty()) {
    absl::StatusOr<std::string> parent = KeptKey(p, req->parent_key(), /*write=*/false);
    if (!parent.ok()) return parent.status();
    req->set_parent_key(*std::move(parent));
  }
  return absl::OkStatus();
}

absl::Status ToKept(const Principal& p, google::protobuf::RepeatedPtrField<std::string>* keys,
                    bool write) {
  if (p.tenant.empty()) return absl::OkStatus();
  for (std::string& k : *keys) {
    absl::StatusOr<std::string> kept = KeptKey(p, k, write);
    if (!kept.ok()) return kept.status();
    k = *std::move(kept);
  }
  return absl::OkStatus();
}

void ToCaller(const Principal& p, const google::protobuf::RepeatedPtrField<std::string>& asked,
              google::protobuf::RepeatedPtrField<v1::ObjectLocation>* objects) {
  if (p.tenant.empty()) return;
  for (int i = 0; i < objects->size(); ++i) {
    v1::ObjectLocation& loc = (*objects)[i];
    if (loc.key().empty()) continue;
    std::string caller = i < asked.size() ? asked[i] : CallerKey(p, loc.key());
    loc.set_store_key(loc.key());
    loc.set_key(std::move(caller));
  }
}

}  // namespace shelf::master
