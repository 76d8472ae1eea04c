#include "common/credentials.h"

#include <algorithm>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/escaping.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "common/hmac.h"
#include "common/secret_file.h"
#include "common/units.h"

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

bool Principal::MayActAsNode(absl::string_view node_id) const {
  if (role == Role::kAdmin) return true;
  if (role != Role::kStore) return false;
  for (const std::string& pattern : nodes) {
    if (!pattern.empty() && pattern.back() == '*') {
      if (absl::StartsWith(node_id, absl::string_view(pattern).substr(0, pattern.size() - 1))) {
        return true;
      }
    } else if (node_id == pattern) {
      return true;
    }
  }
  return false;
}

namespace {

// A CURVE key in Z85 (ZMQ RFC 32): 40 characters of its alphabet.
bool ValidZ85Key(absl::string_view key) {
  static constexpr absl::string_view kAlphabet =
      "0123456789abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ.-:+=^!/*?&<>()[]{}@%$#";
  if (key.size() != 40) return false;
  for (char c : key) {
    if (kAlphabet.find(c) == absl::string_view::npos) return false;
  }
  return true;
}

// One KEY=VALUE option of a line into `q` (or `read_tenants`, when given).
// `tenant_line`: a `tenant=` line, which takes every quota.
absl::Status ParseOption(absl::string_view opt, bool tenant_line, QuotaLimits* q,
                         std::vector<std::string>* read_tenants, std::vector<std::string>* nodes,
                         std::string* events_key) {
  size_t eq = opt.find('=');
  if (eq == absl::string_view::npos || eq == 0) return absl::InvalidArgumentError("want KEY=VALUE");
  absl::string_view key = opt.substr(0, eq);
  absl::string_view value = opt.substr(eq + 1);
  if (key == "read") {
    if (read_tenants == nullptr) {
      return absl::InvalidArgumentError("read= is for engines and gateways");
    }
    for (absl::string_view t : absl::StrSplit(value, ',')) {
      if (!ValidTenantName(t)) return absl::InvalidArgumentError("bad tenant in read=");
      read_tenants->emplace_back(t);
    }
    return absl::OkStatus();
  }
  if (key == "events_key") {
    if (events_key == nullptr) {
      return absl::InvalidArgumentError("events_key= is for engines, gateways and admins");
    }
    if (!ValidZ85Key(value)) {
      return absl::InvalidArgumentError(
          "events_key= takes a CURVE public key: 40 Z85 characters (docs/events.md, Security)");
    }
    *events_key = std::string(value);
    return absl::OkStatus();
  }
  if (key == "nodes") {
    if (nodes == nullptr) return absl::InvalidArgumentError("nodes= is for stores");
    for (absl::string_view n : absl::StrSplit(value, ',')) {
      if (n.empty() || n.find('*') < n.size() - 1) {
        return absl::InvalidArgumentError(
            "nodes= takes node ids, or prefixes ending in '*', separated by commas");
      }
      nodes->emplace_back(n);
    }
    return absl::OkStatus();
  }
  struct Field {
    const char* key;
    uint64_t QuotaLimits::*field;
    enum { kSize, kCount, kDuration } kind;
    bool tenant_only;
  };
  static constexpr Field kFields[] = {
      {"dram", &QuotaLimits::dram_bytes, Field::kSize, false},
      {"ssd", &QuotaLimits::ssd_bytes, Field::kSize, false},
      {"guarantee", &QuotaLimits::guarantee_dram_bytes, Field::kSize, true},
      {"puts", &QuotaLimits::puts, Field::kCount, false},
      {"put_bytes", &QuotaLimits::put_bytes, Field::kSize, false},
      {"leased", &QuotaLimits::leased_bytes, Field::kSize, false},
      {"pinned", &QuotaLimits::pinned_bytes, Field::kSize, false},
      {"pin_ttl", &QuotaLimits::pin_ttl_ms, Field::kDuration, false},
  };
  for (const Field& f : kFields) {
    if (key != f.key) continue;
    if (f.tenant_only && !tenant_line) {
      return absl::InvalidArgumentError(
          absl::StrCat(key, "= is a tenant's quota: put it on a tenant= line"));
    }
    absl::StatusOr<uint64_t> v;
    uint64_t n = 0;
    switch (f.kind) {
      case Field::kSize:
        v = ParseSize(value);
        break;
      case Field::kDuration:
        v = ParseDurationMs(value);
        break;
      case Field::kCount:
        if (!absl::SimpleAtoi(value, &n)) return absl::InvalidArgumentError("puts= is a count");
        v = n;
        break;
    }
    if (!v.ok()) return absl::InvalidArgumentError(absl::StrCat(key, "=: ", v.status().message()));
    q->*f.field = *v;
    return absl::OkStatus();
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "unknown option '", key,
      "' (read, nodes, events_key, dram, ssd, guarantee, puts, put_bytes, leased, pinned, "
      "pin_ttl)"));
}

}  // namespace

absl::StatusOr<std::vector<PrincipalEntry>> ParseCredentials(absl::string_view text,
                                                             absl::string_view origin,
                                                             TenantQuotas* tenants) {
  std::vector<PrincipalEntry> out;
  TenantQuotas tenant_lines;
  size_t line_no = 0;
  for (absl::string_view line : absl::StrSplit(text, '\n')) {
    ++line_no;
    line = absl::StripAsciiWhitespace(line);
    if (line.empty() || line[0] == '#') continue;
    std::vector<absl::string_view> f =
        absl::StrSplit(line, absl::ByAnyChar(" \t"), absl::SkipEmpty());
    if (absl::StartsWith(f[0], "tenant=")) {
      absl::string_view name = f[0].substr(7);
      if (!ValidTenantName(name)) {
        return LineError(origin, line_no, "a tenant is 1..32 of [A-Za-z0-9_-]");
      }
      QuotaLimits q;
      for (size_t i = 1; i < f.size(); ++i) {
        if (absl::Status s = ParseOption(f[i], /*tenant_line=*/true, &q, nullptr, nullptr, nullptr);
            !s.ok()) {
          return LineError(origin, line_no, s.message());
        }
      }
      if (!tenant_lines.emplace(std::string(name), q).second) {
        return LineError(origin, line_no, absl::StrCat("tenant '", name, "' appears twice"));
      }
      continue;
    }
    if (f.size() < 4) {
      return LineError(origin, line_no, "want NAME ROLE TENANT SECRET [OPTION...]");
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
    for (size_t i = 4; i < f.size(); ++i) {
      absl::Status s = ParseOption(f[i], /*tenant_line=*/false, &p.quotas,
                                   p.engine_like() ? &p.read_tenants : nullptr,
                                   p.role == Role::kStore ? &p.nodes : nullptr,
                                   p.role == Role::kStore ? nullptr : &p.events_key);
      if (!s.ok()) return LineError(origin, line_no, s.message());
    }
    if (p.role == Role::kStore && p.nodes.empty()) {
      // A store credential names what it may register: without that, any
      // store host could register a node of its choosing and report, in
      // its inventory, blocks in any tenant's namespace.
      return LineError(origin, line_no,
                       "a store names the node ids it may register: nodes=ID[,ID...] (a "
                       "trailing * matches a prefix; nodes=* any)");
    }
    for (const PrincipalEntry& prev : out) {
      if (prev.principal.name == p.name) {
        return LineError(origin, line_no, absl::StrCat("principal '", p.name, "' appears twice"));
      }
    }
    out.push_back(std::move(e));
  }
  if (out.empty()) return absl::InvalidArgumentError(absl::StrCat(origin, " names no principal"));
  if (tenants != nullptr) *tenants = std::move(tenant_lines);
  return out;
}

absl::StatusOr<std::vector<PrincipalEntry>> ReadCredentialsFile(const std::string& path,
                                                                TenantQuotas* tenants) {
  absl::StatusOr<std::string> text = ReadPrivateFile(path, "--credentials");
  if (!text.ok()) return text.status();
  return ParseCredentials(*text, absl::StrCat("credentials file '", path, "'"), tenants);
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

std::shared_ptr<Authenticator> Authenticator::FromEntries(std::vector<PrincipalEntry> entries,
                                                          TenantQuotas tenants) {
  auto a = std::shared_ptr<Authenticator>(new Authenticator(Mode::kPrincipals));
  a->Install(std::move(entries), std::move(tenants));
  return a;
}

absl::StatusOr<std::shared_ptr<Authenticator>> Authenticator::FromFile(const std::string& path) {
  TenantQuotas tenants;
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(path, &tenants);
  if (!entries.ok()) return entries.status();
  std::shared_ptr<Authenticator> a = FromEntries(*std::move(entries), std::move(tenants));
  a->path_ = path;
  return a;
}

void Authenticator::Install(std::vector<PrincipalEntry> entries, TenantQuotas tenants) {
  auto table = std::make_shared<absl::flat_hash_map<std::string, Known>>();
  for (PrincipalEntry& e : entries) {
    std::string mac = TokenMac(e.principal.name, e.secret);
    std::string name = e.principal.name;
    (*table)[name] = Known{std::move(e.principal), std::move(mac)};
  }
  auto quotas = std::make_shared<const TenantQuotas>(std::move(tenants));
  MutexLock lock(&mu_);
  table_ = std::move(table);
  tenant_quotas_ = std::move(quotas);
}

absl::Status Authenticator::Reload() {
  if (mode_ != Mode::kPrincipals || path_.empty()) return absl::OkStatus();
  TenantQuotas tenants;
  absl::StatusOr<std::vector<PrincipalEntry>> entries = ReadCredentialsFile(path_, &tenants);
  if (!entries.ok()) return entries.status();
  Install(*std::move(entries), std::move(tenants));
  return absl::OkStatus();
}

size_t Authenticator::size() const {
  MutexLock lock(&mu_);
  return table_ == nullptr ? 0 : table_->size();
}

std::shared_ptr<const TenantQuotas> Authenticator::tenant_quotas() const {
  MutexLock lock(&mu_);
  return tenant_quotas_;
}

std::vector<std::string> Authenticator::tenants() const {
  std::vector<std::string> out;
  MutexLock lock(&mu_);
  for (const auto& [name, q] : *tenant_quotas_) out.push_back(name);
  if (table_ != nullptr) {
    for (const auto& [name, k] : *table_) {
      if (!k.principal.tenant.empty()) out.push_back(k.principal.tenant);
    }
  }
  std::sort(out.begin(), out.end());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
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
    MutexLock lock(&mu_);
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
