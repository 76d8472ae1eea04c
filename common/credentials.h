// Principals: who a gRPC caller is, what it may do, and whose keys it names
// (docs/security.md, "Principals and tenants").
//
// A credentials file (`--credentials FILE`) has one principal per line:
//
//   # NAME     ROLE     TENANT   SECRET                 [OPTION...]
//   vllm-a     engine   team-a   3c1e...(>= 16 bytes)   puts=64 pin_ttl=10m
//   resp-a     gateway  team-a   91ab...                read=prompts
//   store-1    store    -        77d0...                nodes=gpu-7,rack2-*
//   ops        admin    -        5f2b...
//   tenant=team-a   dram=64GiB ssd=1TiB guarantee=16GiB
//
// Fields are separated by spaces or tabs; `#` starts a comment line.
// NAME is [A-Za-z0-9_.-]{1,64}; ROLE engine, store, gateway or admin; TENANT
// [A-Za-z0-9_-]{1,32} for engines and gateways, `-` for stores and admins;
// SECRET at least 16 bytes without whitespace. OPTIONs are KEY=VALUE:
// `read=TENANT,...` names the tenants whose keys this principal may also
// read; `events_key=Z85` the CURVE public key it reads KV events with; a
// store's `nodes=ID,...` (required) the node ids it may register as (a
// trailing `*` matches a prefix, `*` alone any); the rest are quotas
// (QuotaLimits). A `tenant=NAME` line sets a tenant's quotas and guaranteed
// DRAM share (docs/security.md, "Quotas").
//
// A caller sends `x-shelf-token: NAME:hex(HMAC-SHA256(SECRET,
// "shelf-grpc-v1:" NAME))`: the secret never travels. A cluster run with
// `--secret-file` alone keeps the bare `hex(HMAC-SHA256(secret,
// "shelf-grpc-v1"))` token, which stands for one all-roles principal.
#ifndef SHELF_COMMON_CREDENTIALS_H_
#define SHELF_COMMON_CREDENTIALS_H_

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace shelf {

enum class Role { kEngine, kStore, kGateway, kAdmin };
const char* RoleName(Role role);

// Quotas (docs/security.md, "Quotas"); 0 = unlimited. A principal's line
// takes every quota but the guaranteed DRAM share, counted over what that
// principal did (stored bytes: the blocks its puts stored); a tenant's line
// takes them all, counted over every principal of the tenant.
struct QuotaLimits {
  uint64_t dram_bytes = 0;            // dram=SIZE: stored in DRAM (every replica)
  uint64_t ssd_bytes = 0;             // ssd=SIZE: stored on SSD
  uint64_t puts = 0;                  // puts=N: puts in flight
  uint64_t put_bytes = 0;             // put_bytes=SIZE: bytes of puts in flight
  uint64_t leased_bytes = 0;          // leased=SIZE: bytes under read leases
  uint64_t pinned_bytes = 0;          // pinned=SIZE: bytes pinned
  uint64_t pin_ttl_ms = 0;            // pin_ttl=DURATION: the longest pin (no hard pins)
  uint64_t guarantee_dram_bytes = 0;  // guarantee=SIZE (tenants): DRAM eviction spares
  bool any() const {
    return dram_bytes != 0 || ssd_bytes != 0 || puts != 0 || put_bytes != 0 || leased_bytes != 0 ||
           pinned_bytes != 0 || pin_ttl_ms != 0;
  }
};

// A caller, as the master resolves it once per call. An empty tenant means
// keys are used exactly as named (admins, stores, and every caller of a
// cluster without a credentials file).
struct Principal {
  std::string name;
  Role role = Role::kAdmin;
  std::string tenant;
  std::vector<std::string> read_tenants;  // besides its own
  // A store's node ids (`nodes=`): exact ids, or prefixes ending in '*'
  // ("*" alone: any). Stores must name theirs; other roles have none.
  std::vector<std::string> nodes;
  QuotaLimits quotas;
  // `events_key=`: the CURVE public key (Z85) this principal subscribes to
  // the KV event stream with (docs/events.md, "Security"); it reads the
  // events of its tenant, an admin every tenant's. Empty: none.
  std::string events_key;
  // Engines and gateways act on keys; a gateway is an engine for its tenant.
  bool engine_like() const { return role == Role::kEngine || role == Role::kGateway; }
  bool MayRead(absl::string_view tenant_name) const;
  // Whether this principal may register, heartbeat and promote as store
  // `node_id`: a store only as one of its `nodes`, an admin as any.
  bool MayActAsNode(absl::string_view node_id) const;
};

// The name used for the all-roles principal of a cluster without a
// credentials file (the cluster secret's holder, or anyone when open).
inline constexpr char kClusterPrincipal[] = "cluster";

// A principal's line of a credentials file, its secret included.
struct PrincipalEntry {
  Principal principal;
  std::string secret;
};

// Tenants' quotas by tenant name (`tenant=` lines).
using TenantQuotas = absl::flat_hash_map<std::string, QuotaLimits>;

// Parses a credentials file's text; INVALID_ARGUMENT naming `origin` and
// the line on any malformed line or duplicate name. `tenants`, when not
// null, receives the `tenant=` lines.
absl::StatusOr<std::vector<PrincipalEntry>> ParseCredentials(absl::string_view text,
                                                             absl::string_view origin,
                                                             TenantQuotas* tenants = nullptr);
// Reads and parses `path`, refused when group or world readable
// (common/secret_file.h).
absl::StatusOr<std::vector<PrincipalEntry>> ReadCredentialsFile(const std::string& path,
                                                                TenantQuotas* tenants = nullptr);

// The token a principal sends: "NAME:hex(HMAC-SHA256(secret, "shelf-grpc-v1:NAME"))".
std::string PrincipalToken(const std::string& name, const std::string& secret);

// The caller side: the token for `principal` from a credentials file (the
// file's only principal when `principal` is empty).
absl::StatusOr<std::string> TokenFromCredentialsFile(const std::string& path,
                                                     const std::string& principal);

bool ValidTenantName(absl::string_view tenant);

// The server side: resolves a call's x-shelf-token to its Principal.
// Thread-safe; Reload swaps the table in place (SIGHUP).
class Authenticator {
 public:
  // Open cluster: every caller is the all-roles principal.
  static std::shared_ptr<Authenticator> Open();
  // --secret-file alone: the bare cluster token, one all-roles principal.
  static std::shared_ptr<Authenticator> ClusterSecret(const std::string& secret);
  // --credentials: the principals of `path`.
  static absl::StatusOr<std::shared_ptr<Authenticator>> FromFile(const std::string& path);
  static std::shared_ptr<Authenticator> FromEntries(std::vector<PrincipalEntry> entries,
                                                    TenantQuotas tenants = {});

  // The caller, or UNAUTHENTICATED (no token, unknown principal, bad token).
  absl::StatusOr<Principal> Authenticate(absl::string_view token) const;
  // Whether calls carry a token at all (false: open cluster).
  bool required() const { return mode_ != Mode::kOpen; }
  bool has_principals() const { return mode_ == Mode::kPrincipals; }
  // Re-reads the credentials file; the old table stays on error.
  absl::Status Reload();
  size_t size() const;
  // The `tenant=` lines, as of the last (re)load; never null.
  std::shared_ptr<const TenantQuotas> tenant_quotas() const;
  // Every tenant the file names (principals' and `tenant=` lines), sorted:
  // the bounded set of per-tenant metric labels.
  std::vector<std::string> tenants() const;

 private:
  enum class Mode { kOpen, kClusterSecret, kPrincipals };
  struct Known {
    Principal principal;
    std::string token_mac;  // the hex MAC expected after "NAME:"
  };
  explicit Authenticator(Mode mode) : mode_(mode) {}
  void Install(std::vector<PrincipalEntry> entries, TenantQuotas tenants);

  const Mode mode_;
  std::string path_;
  std::string cluster_token_;
  mutable Mutex mu_;
  std::shared_ptr<const absl::flat_hash_map<std::string, Known>> table_ ABSL_GUARDED_BY(mu_);
  std::shared_ptr<const TenantQuotas> tenant_quotas_ ABSL_GUARDED_BY(mu_) =
      std::make_shared<TenantQuotas>();
};

}  // namespace shelf

#endif  // SHELF_COMMON_CREDENTIALS_H_
