// Tenant namespaces (docs/security.md, "Tenants"): the master keeps an
// engine's or gateway's keys as TENANT "/" KEY. Tenant names cannot hold
// '/', so the mapping is injective; a caller without a tenant (an admin, a
// store, every caller of a cluster without a credentials file) names keys
// exactly as they are kept.
//
// A caller names another tenant's key, which it may only read, and only
// when the credentials file gives it `read=` that tenant, as "@TENANT/KEY".
// Its own keys it names plainly; one of its own keys that starts with '@'
// is written "@OWN/@..." (the form responses show it in).
//
// The service layer rewrites each request into the kept form before the
// Master sees it, and each response's keys back into the caller's form.
#ifndef SHELF_SERVER_MASTER_QUOTAS_TENANT_KEYS_H_
#define SHELF_SERVER_MASTER_QUOTAS_TENANT_KEYS_H_

#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/credentials.h"
#include "proto/shelf.pb.h"

namespace shelf::master {

inline constexpr char kTenantSeparator = '/';

// The kept form of `key` as `p` names it. `write`: the caller means to
// create, remove or pin it, which only its own tenant allows.
// PERMISSION_DENIED for another tenant's key (any write; a read without
// `read=`); INVALID_ARGUMENT for a malformed "@" form.
absl::StatusOr<std::string> KeptKey(const Principal& p, const std::string& key, bool write);
// The form `p` names the kept key `kept` by.
std::string CallerKey(const Principal& p, const std::string& kept);
// The kept-key prefix of `p`'s namespace ("" without a tenant).
std::string TenantScope(const Principal& p);

// Rewrites requests in place (no-ops without a tenant). A key the caller
// may not name fails the whole call.
absl::Status ToKept(const Principal& p, v1::PutStartRequest* req);
absl::Status ToKept(const Principal& p, google::protobuf::RepeatedPtrField<std::string>* keys,
                    bool write);
// Rewrites a response's locations, parallel to the keys the caller `asked`:
// `key` back to the name it used, `store_key` to the kept one (the key
// stores hold the block under, for READ_KEY).
void ToCaller(const Principal& p, const google::protobuf::RepeatedPtrField<std::string>& asked,
              google::protobuf::RepeatedPtrField<v1::ObjectLocation>* objects);

}  // namespace shelf::master

#endif  // SHELF_SERVER_MASTER_QUOTAS_TENANT_KEYS_H_
