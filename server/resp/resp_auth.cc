#include "server/resp/resp_auth.h"

#include <openssl/crypto.h>
#include <openssl/sha.h>

#include <algorithm>

namespace shelf::resp {
namespace {

std::string Sha256(absl::string_view bytes) {
  std::string digest(SHA256_DIGEST_LENGTH, '\0');
  SHA256(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(),
         reinterpret_cast<unsigned char*>(digest.data()));
  return digest;
}

}  // namespace

PasswordCheck::PasswordCheck(absl::string_view password,
                             const std::map<std::string, std::string>& users)
    : required_(!password.empty()), digest_(Sha256(password)) {
  for (const auto& [name, secret] : users) users_.emplace(name, Sha256(secret));
}

std::string PasswordCheck::AddressOf(absl::string_view peer) {
  // "[v6]:port" or "v4:port": the part before the last colon.
  const size_t colon = peer.rfind(':');
  return std::string(colon == absl::string_view::npos ? peer : peer.substr(0, colon));
}

PasswordCheck::Verdict PasswordCheck::Check(absl::string_view peer, absl::string_view user,
                                            absl::string_view password, uint64_t now_ms,
                                            uint64_t* retry_ms) {
  // Without passwords any AUTH passes, as with Redis's `nopass` default
  // user; the default user without a password passes beside named ones.
  const bool named = user != "default";
  if (!required_ && (!named || users_.empty())) return Verdict::kOk;
  const std::string address = AddressOf(peer);
  {
    MutexLock l(&mu_);
    auto it = failures_.find(address);
    if (it != failures_.end() && now_ms < it->second.until_ms) {
      *retry_ms = it->second.until_ms - now_ms;
      return Verdict::kBackoff;
    }
  }
  // Both sides hashed: the comparison takes the same time whatever the
  // guess's bytes and length. An unknown user is compared with the default
  // user's digest, and fails: user names are not secret, but the check
  // takes one time for all.
  auto known = named ? users_.find(user) : users_.end();
  const std::string& digest = known != users_.end() ? known->second : digest_;
  const std::string guess = Sha256(password);
  const bool match = CRYPTO_memcmp(guess.data(), digest.data(), digest.size()) == 0;
  const bool ok = match && (!named || known != users_.end());
  MutexLock l(&mu_);
  if (ok) {
    failures_.erase(address);
    return Verdict::kOk;
  }
  auto it = failures_.find(address);
  if (it == failures_.end()) {
    if (failures_.size() >= kAddressesMax) ForgetOneLocked();
    it = failures_.emplace(address, Failures{}).first;
  }
  Failures& f = it->second;
  if (f.count > 0 && now_ms - f.last_ms > kForgetAfterMs) f.count = 0;
  f.count = std::min<uint32_t>(f.count + 1, 32);
  f.last_ms = now_ms;
  const uint64_t backoff =
      f.count >= 8 ? kBackoffMaxMs : std::min(kBackoffMaxMs, kBackoffFirstMs << (f.count - 1));
  f.until_ms = now_ms + backoff;
  return Verdict::kWrongPass;
}

void PasswordCheck::ForgetOneLocked() {
  auto oldest = failures_.begin();
  for (auto it = failures_.begin(); it != failures_.end(); ++it) {
    if (it->second.last_ms < oldest->second.last_ms) oldest = it;
  }
  if (oldest != failures_.end()) failures_.erase(oldest);
}

}  // namespace shelf::resp
