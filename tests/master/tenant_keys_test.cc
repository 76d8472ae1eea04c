// The credentials file's parser, principal tokens and the tenant key
// mapping (common/credentials.h, server/master/tenant_keys.h), without a
// cluster; tests/security/principals_test.cc runs them against real processes.
#include "server/master/quotas/tenant_keys.h"

#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "common/credentials.h"
#include "common/rpc.h"

namespace shelf::master {
namespace {

constexpr char kGood[] =
    "# a comment\n"
    "\n"
    "eng-a\tengine  team-a  0123456789abcdef01\n"
    "  gw.a gateway team-a  0123456789abcdef02  read=prompts,shared_1\n"
    "st-1   store   -       0123456789abcdef03   nodes=*\n"
    "ops    admin   -       0123456789abcdef04\n";

TEST(CredentialsTest, ParsesEveryRole) {
  auto entries = ParseCredentials(kGood, "test");
  ASSERT_TRUE(entries.ok()) << entries.status();
  ASSERT_EQ(entries->size(), 4u);
  const Principal& gw = (*entries)[1].principal;
  EXPECT_EQ(gw.name, "gw.a");
  EXPECT_EQ(gw.role, Role::kGateway);
  EXPECT_EQ(gw.tenant, "team-a");
  EXPECT_EQ(gw.read_tenants, (std::vector<std::string>{"prompts", "shared_1"}));
  EXPECT_TRUE(gw.MayRead("prompts"));
  EXPECT_FALSE(gw.MayRead("team-b"));
  EXPECT_EQ((*entries)[2].principal.role, Role::kStore);
  EXPECT_TRUE((*entries)[2].principal.tenant.empty());
  EXPECT_EQ((*entries)[3].secret, "0123456789abcdef04");
}

TEST(CredentialsTest, RefusesMalformedLinesNamingThem) {
  for (const char* bad : {
           "eng engine team-a\n",                       // no secret
           "eng engine team-a 0123456789abcdef x y\n",  // too many fields
           "eng wizard team-a 0123456789abcdef\n",      // no such role
           "eng engine team/a 0123456789abcdef\n",      // separator in a tenant
           "eng engine 0123456789abcdef0123456789abcdef0 0123456789abcdef\n",  // tenant > 32
           "eng engine - 0123456789abcdef\n",               // engine without tenant
           "st store team-a 0123456789abcdef nodes=*\n",    // store with a tenant
           "st store - 0123456789abcdef\n",                 // store without nodes=
           "st store - 0123456789abcdef nodes=\n",          // an empty node id
           "st store - 0123456789abcdef nodes=a*b\n",       // '*' not at the end
           "eng engine team-a 0123456789abcdef nodes=*\n",  // nodes= on an engine
           "eng engine team-a short\n",                     // secret < 16 bytes
           "e:g engine team-a 0123456789abcdef\n",          // ':' in a name
           "eng engine team-a 0123456789abcdef reads=x\n",  // not read=
           "ops admin - 0123456789abcdef read=x\n",         // read= on an admin
           "eng engine team-a 0123456789abcdef\neng engine team-b 0123456789abcdef\n",
           "# only a comment\n",
       }) {
    auto entries = ParseCredentials(bad, "f");
    EXPECT_EQ(entries.status().code(), absl::StatusCode::kInvalidArgument) << bad;
  }
  auto dup = ParseCredentials("a engine t 0123456789abcdef\na engine u 0123456789abcdef\n", "f");
  EXPECT_NE(dup.status().message().find("f line 2"), std::string::npos) << dup.status();
}

TEST(CredentialsTest, AStoreActsOnlyAsTheNodesItNames) {
  auto entries = ParseCredentials(
      "st-1 store - 0123456789abcdef01 nodes=gpu-7,rack2-*\n"
      "st-any store - 0123456789abcdef02 nodes=*\n"
      "eng engine t 0123456789abcdef03\n"
      "ops admin - 0123456789abcdef04\n",
      "test");
  ASSERT_TRUE(entries.ok()) << entries.status();
  const Principal& st = (*entries)[0].principal;
  EXPECT_TRUE(st.MayActAsNode("gpu-7"));
  EXPECT_TRUE(st.MayActAsNode("rack2-node-3"));
  EXPECT_TRUE(st.MayActAsNode("rack2-"));
  EXPECT_FALSE(st.MayActAsNode("gpu-70"));
  EXPECT_FALSE(st.MayActAsNode("gpu-"));
  EXPECT_FALSE(st.MayActAsNode("rack3-node-1"));
  EXPECT_FALSE(st.MayActAsNode(""));
  EXPECT_TRUE((*entries)[1].principal.MayActAsNode("anything"));
  EXPECT_FALSE((*entries)[2].principal.MayActAsNode("gpu-7"));
  EXPECT_TRUE((*entries)[3].principal.MayActAsNode("gpu-7"));
}

TEST(CredentialsTest, ParsesQuotasOfPrincipalsAndTenants) {
  TenantQuotas tenants;
  auto entries = ParseCredentials(
      "eng-a engine team-a 0123456789abcdef01 puts=8 put_bytes=64MiB leased=1GiB pinned=2GiB "
      "pin_ttl=10m read=prompts\n"
      "tenant=team-a dram=4GiB ssd=1TiB guarantee=1GiB puts=64\n",
      "test", &tenants);
  ASSERT_TRUE(entries.ok()) << entries.status();
  const QuotaLimits& q = (*entries)[0].principal.quotas;
  EXPECT_EQ(q.puts, 8u);
  EXPECT_EQ(q.put_bytes, 64ull << 20);
  EXPECT_EQ(q.leased_bytes, 1ull << 30);
  EXPECT_EQ(q.pinned_bytes, 2ull << 30);
  EXPECT_EQ(q.pin_ttl_ms, 600000u);
  EXPECT_EQ(q.dram_bytes, 0u);  // unlimited
  EXPECT_EQ((*entries)[0].principal.read_tenants, std::vector<std::string>{"prompts"});
  ASSERT_TRUE(tenants.contains("team-a"));
  EXPECT_EQ(tenants["team-a"].dram_bytes, 4ull << 30);
  EXPECT_EQ(tenants["team-a"].ssd_bytes, 1ull << 40);
  EXPECT_EQ(tenants["team-a"].guarantee_dram_bytes, 1ull << 30);
  EXPECT_EQ(tenants["team-a"].puts, 64u);
  auto auth = Authenticator::FromEntries(*entries, tenants);
  EXPECT_EQ(auth->tenants(), (std::vector<std::string>{"team-a"}));
  for (const char* bad : {
           "eng engine t 0123456789abcdef guarantee=1GiB\n",       // a share: a tenant's
           "eng engine t 0123456789abcdef puts=many\n",            // not a count
           "eng engine t 0123456789abcdef pinned=lots\n",          // not a size
           "eng engine t 0123456789abcdef colour=blue\n",          // no such quota
           "eng engine t 0123456789abcdef\ntenant=t/x dram=1\n",   // bad tenant name
           "eng engine t 0123456789abcdef\ntenant=t\ntenant=t\n",  // twice
       }) {
    EXPECT_EQ(ParseCredentials(bad, "f").status().code(), absl::StatusCode::kInvalidArgument)
        << bad;
  }
  // Stored bytes on a principal's line: what its own puts stored.
  auto own = ParseCredentials("eng engine t 0123456789abcdef dram=1GiB ssd=2GiB\n", "f");
  ASSERT_TRUE(own.ok()) << own.status();
  EXPECT_EQ((*own)[0].principal.quotas.dram_bytes, 1ull << 30);
  EXPECT_EQ((*own)[0].principal.quotas.ssd_bytes, 2ull << 30);
}

TEST(CredentialsTest, AuthenticatesByNameAndMacOnly) {
  auto entries = ParseCredentials(kGood, "test");
  ASSERT_TRUE(entries.ok());
  auto auth = Authenticator::FromEntries(*entries);
  auto p = auth->Authenticate(PrincipalToken("eng-a", "0123456789abcdef01"));
  ASSERT_TRUE(p.ok()) << p.status();
  EXPECT_EQ(p->tenant, "team-a");
  const std::string token = PrincipalToken("eng-a", "0123456789abcdef01");
  EXPECT_EQ(token.find("0123456789abcdef01"), std::string::npos);  // the secret is not sent
  for (const std::string& bad :
       {std::string(), PrincipalToken("eng-a", "0123456789abcdef02"),
        PrincipalToken("nobody", "0123456789abcdef01"), std::string("eng-a:"),
        PrincipalToken("gw.a", "0123456789abcdef01"),  // another's secret
        "gw.a" + token.substr(token.find(':')),        // another's MAC under this name
        AuthToken("0123456789abcdef01")}) {
    EXPECT_EQ(auth->Authenticate(bad).status().code(), absl::StatusCode::kUnauthenticated) << bad;
  }
  // The cluster secret alone is one all-roles principal without a tenant.
  auto legacy = Authenticator::ClusterSecret("0123456789abcdef99");
  auto all = legacy->Authenticate(AuthToken("0123456789abcdef99"));
  ASSERT_TRUE(all.ok());
  EXPECT_EQ(all->role, Role::kAdmin);
  EXPECT_TRUE(all->tenant.empty());
  EXPECT_FALSE(legacy->Authenticate(token).ok());
  EXPECT_TRUE(Authenticator::Open()->Authenticate("").ok());
}

TEST(CredentialsTest, AFileOthersCanReadIsRefused) {
  char tmpl[] = "/tmp/shelf-creds-XXXXXX";
  int fd = mkstemp(tmpl);
  ASSERT_GE(fd, 0);
  close(fd);
  std::ofstream(tmpl) << kGood;
  ::chmod(tmpl, 0644);
  EXPECT_EQ(Authenticator::FromFile(tmpl).status().code(), absl::StatusCode::kPermissionDenied);
  ::chmod(tmpl, 0600);
  auto auth = Authenticator::FromFile(tmpl);
  ASSERT_TRUE(auth.ok()) << auth.status();
  EXPECT_EQ((*auth)->size(), 4u);
  // Reload: a file that no longer parses keeps the old table.
  std::ofstream(tmpl) << "garbage\n";
  EXPECT_FALSE((*auth)->Reload().ok());
  EXPECT_TRUE((*auth)->Authenticate(PrincipalToken("ops", "0123456789abcdef04")).ok());
  std::ofstream(tmpl) << "new engine team-n 0123456789abcdef05\n";
  EXPECT_TRUE((*auth)->Reload().ok());
  EXPECT_FALSE((*auth)->Authenticate(PrincipalToken("ops", "0123456789abcdef04")).ok());
  EXPECT_TRUE((*auth)->Authenticate(PrincipalToken("new", "0123456789abcdef05")).ok());
  EXPECT_TRUE(TokenFromCredentialsFile(tmpl, "").ok());  // the only principal
  EXPECT_EQ(TokenFromCredentialsFile(tmpl, "other").status().code(), absl::StatusCode::kNotFound);
  std::remove(tmpl);
}

Principal Engine(const std::string& tenant, std::vector<std::string> reads = {}) {
  Principal p;
  p.name = "e";
  p.role = Role::kEngine;
  p.tenant = tenant;
  p.read_tenants = std::move(reads);
  return p;
}

TEST(TenantKeysTest, KeysMapIntoTheTenantAndBack) {
  const Principal a = Engine("team-a", {"prompts"});
  EXPECT_EQ(*KeptKey(a, "k", true), "team-a/k");
  EXPECT_EQ(*KeptKey(a, "team-b/k", true), "team-a/team-b/k");
  EXPECT_EQ(*KeptKey(a, "@team-a/k", true), "team-a/k");
  EXPECT_EQ(*KeptKey(a, "@team-a/@x", true), "team-a/@x");
  EXPECT_EQ(*KeptKey(a, "@prompts/sys", false), "prompts/sys");
  EXPECT_EQ(KeptKey(a, "@prompts/sys", true).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(KeptKey(a, "@team-b/k", false).status().code(), absl::StatusCode::kPermissionDenied);
  EXPECT_EQ(KeptKey(a, "@nosep", false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(KeptKey(a, "@/k", false).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(CallerKey(a, "team-a/k"), "k");
  EXPECT_EQ(CallerKey(a, "team-a/@x"), "@team-a/@x");
  EXPECT_EQ(CallerKey(a, "prompts/sys"), "@prompts/sys");
  // Round trips, and no two caller names of one tenant share a kept key
  // unless they name the same key.
  std::set<std::string> kept;
  for (const char* k : {"k", "@team-a/k2", "@x", "a/b", "", "team-a/k"}) {
    std::string name = std::string(k) == "@x" ? "@team-a/@x" : k;
    auto to = KeptKey(a, name, true);
    ASSERT_TRUE(to.ok()) << name;
    auto back = KeptKey(a, CallerKey(a, *to), true);
    ASSERT_TRUE(back.ok());
    EXPECT_EQ(*back, *to) << name;
    EXPECT_TRUE(kept.insert(*to).second) << name;
  }
  // Without a tenant keys are kept as named.
  Principal admin;
  EXPECT_EQ(*KeptKey(admin, "@team-a/k", true), "@team-a/k");
  EXPECT_EQ(CallerKey(admin, "team-a/k"), "team-a/k");
}

}  // namespace
}  // namespace shelf::master
