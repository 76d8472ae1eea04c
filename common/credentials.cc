#include "common/credentials.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hmac.h"
#include "common/secret_file.h"

namespace shelf {

namespace {

constexpr size_t kNameBytesMax = 64;
constexpr size_t kTenantBytesMax = 32;
constexpr size_t kSecretBytesMin = 16;

bool ValidPrincipalName(absl::string_view name) {
  if (name.empty() || name.size() > kNameBytesMax) return false;
  return std::all_of(name.begin(), name.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-' || c == '.';
  });
}

std::string TokenMac(absl::string_view name, absl::string_view secret) {
  return absl::BytesToHexString(HmacSha256(secret, absl::StrCat("shelf-grpc-v1:", name)));
}

absl::Status LineError(absl::string_view origin, size_t line, absl::string_view what) {
  return absl::InvalidArgumentError(absl::StrCat(origin, " line ", line, ": ", what));
}

}  // namespace

const char* RoleName(Role role) {
  switch (role) {
    case Role::kEngine:
      return "engine";
    case Role::kStore:
      return "store";
    case Role::kGateway:
      return "gateway";
    case Role::kAdmin:
      return "admin";
  }
  return "?";
}

bool ValidTenantName(absl::string_view tenant) {
  if (tenant.empty() || tenant.size() > kTenantBytesMax) return false;
  return std::all_of(tenant.begin(), tenant.end(), [](char c) {
    return absl::ascii_isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
}

bool Principal::MayRead(absl::string_view tenant_name) const {
  if (tenant.empty() || tenant == tenant_name) return true;
  return std::find(read_tenants.begin(), read_tenants.end(), tenant_name) != read_tenants.end();
}

absl::StatusOr<std::vector<PrincipalEntry>> ParseCredentials(absl::string_view text,
                                                             absl::string_view origin) {
  std::vector<PrincipalEntry> out;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (f.size() < 4 || f.size() > 5) {
      return LineError(origin, line_no, "want NAME ROLE TENANT SECRET [read=TENANT,...]");
    }
    PrincipalEntry e;
    Principal& p = e.principal;
    if (!ValidPrincipalName(f[0])) {
      return LineError(origin, line_no, "a name is 1..64 of [A-Za-z0-9_.-]");
    }
    p.name = std::string(f[0]);
    if (f[1] == "engine") {
      p.role = Role::kEngine;
    } else if (f[1] == "store") {
      p.role = Role::kStore;
    } else if (f[1] == "gateway") {
      p.role = Role::kGateway;
    } else if (f[1] == "admin") {
      p.role = Role::kAdmin;
    } else {
      return LineError(origin, line_no, "the role is engine, store, gateway or admin");
    }
    if (p.engine_like()) {
      if (!ValidTenantName(f[2]) || f[2] == "-") {
        return LineError(origin, line_no,
                         "an engine's or gateway's tenant is 1..32 of [A-Za-z0-9_-]");
      }
      p.tenant = std::string(f[2]);
    } else if (f[2] != "-") {
      return LineError(origin, line_no, "a store or admin has no tenant: write -");
    }
    if (f[3].size() < kSecretBytesMin) {
      return LineError(origin, line_no, "a secret is at least 16 bytes");
    }
    e.secret = std::string(f[3]);
    if (f.size() == 5) {
      if (!absl::StartsWith(f[4], "read=") || !p.engine_like()) {
        return LineError(origin, line_no,
                         "the fifth field is read=TENANT[,TENANT...] (engines and gateways)");
      }
      for (absl::string_view t : absl::StrSplit(f[4].substr(5), ',')) {
        if (!ValidTenantName(t)) return LineError(origin, line_no, "bad tenant in read=");
        p.read_tenants.emplace_back(t);
      }
    }
    for (const PrincipalEntry& prev : out) {
      if (prev.principal.name == p.name) {
        return LineError(origin, line_no, absl::StrCat("principal '", p.name, "' appears twice"));
      }
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, " names no principal"));
  return out;
}

absl::StatusOr<std::vector<PrincipalEntry>> ReadCredentialsFile(const std::string& path) {
  absl::StatusOr<std::string> text = ReadPrivateFile(path, "--credentials");
  if (!text.ok()) return text.status();
  return ParseCredentials(*text, absl::StrCat("credentials file '", path, "'"));
}

std::string PrincipalToken(const std::string& name, const std::string& secret) {
  return absl::StrCat(name, ":", TokenMac(name, secret));
}

absl::StatusOr<std::string> TokenFromCredentialsFile(const std::string& path,
                                                     const std::string& principal) {
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(path);
  if (!entries.ok()) return entries.status();
  if (principal.empty()) {
    if (entries->size() != 1) {
      return absl::InvalidArgumentError(absl::StrCat(
          "credentials file '", path, "' names several principals: say which (--principal)"));
    }
    return PrincipalToken(entries->front().principal.name, entries->front().secret);
  }
  for (const PrincipalEntry& e : *entries) {
    if (e.principal.name == principal) return PrincipalToken(e.principal.name, e.secret);
  }
  return absl::NotFoundError(
      absl::StrCat("credentials file '", path, "' has no principal '", principal, "'"));
}

std::shared_ptr<Authenticator> Authenticator::Open() {
  return std::shared_ptr<Authenticator>(new Authenticator(Mode::kOpen));
}

std::shared_ptr<Authenticator> Authenticator::ClusterSecret(const std::string& secret) {
  if (secret.empty()) return Open();
  auto a = std::shared_ptr<Authenticator>(new Authenticator(Mode::kClusterSecret));
  a->cluster_token_ = absl::BytesToHexString(HmacSha256(secret, "shelf-grpc-v1"));
  return a;
}

std::shared_ptr<Authenticator> Authenticator::FromEntries(std::vector<PrincipalEntry> entries) {
  auto a = std::shared_ptr<Authenticator>(new Authenticator(Mode::kPrincipals));
  a->Install(std::move(entries));
  return a;
}

absl::StatusOr<std::shared_ptr<Authenticator>> Authenticator::FromFile(const std::string& path) {
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(path);
  if (!entries.ok()) return entries.status();
  std::shared_ptr<Authenticator> a = FromEntries(*std::move(entries));
  a->path_ = path;
  return a;
}

void Authenticator::Install(std::vector<PrincipalEntry> entries) {
  auto table = std::make_shared<absl::flat_hash_map<std::string, Known>>();
  for (PrincipalEntry& e : entries) {
    std::string mac = TokenMac(e.principal.name, e.secret);
    std::string name = e.principal.name;
    (*table)[name] = Known{std::move(e.principal), std::move(mac)};
  }
  absl::MutexLock lock(&mu_);
  table_ = std::move(table);
}

absl::Status Authenticator::Reload() {
  if (mode_ != Mode::kPrincipals || path_.empty()) return absl::OkStatus();
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(path_);
  if (!entries.ok()) return entries.status();
  Install(*std::move(entries));
  return absl::OkStatus();
}

size_t Authenticator::size() const {
  absl::MutexLock lock(&mu_);
  return table_ == nullptr ? 0 : table_->size();
}

absl::StatusOr<Principal> Authenticator::Authenticate(absl::string_view token) const {
  Principal all;
  all.name = kClusterPrincipal;
  all.role = Role::kAdmin;
  switch (mode_) {
    case Mode::kOpen:
      return all;
    case Mode::kClusterSecret:
      if (token.empty()) {
        return absl::UnauthenticatedError("this cluster needs a secret: pass --secret-file");
      }
      if (!ConstantTimeEqual(token, cluster_token_)) {
        return absl::UnauthenticatedError("wrong cluster secret");
      }
      return all;
    case Mode::kPrincipals:
      break;
  }
  if (token.empty()) {
    return absl::UnauthenticatedError(
        "this cluster authenticates principals: pass --credentials (and --principal)");
  }
  size_t colon = token.find(':');
  if (colon == absl::string_view::npos) {
    return absl::UnauthenticatedError(
        "this cluster authenticates principals, not the cluster secret: pass --credentials");
  }
  std::shared_ptr<const absl::flat_hash_map<std::string, Known>> table;
  {
    absl::MutexLock lock(&mu_);
    table = table_;
  }
  auto it = table->find(token.substr(0, colon));
  // An unknown name and a wrong MAC read the same to the caller.
  if (it == table->end() || !ConstantTimeEqual(token.substr(colon + 1), it->second.token_mac)) {
    return absl::UnauthenticatedError("unknown principal or wrong secret");
  }
  return it->second.principal;
}

}  // namespace shelf
