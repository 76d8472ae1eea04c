// The password check of shelf-resp, one for AUTH and for HELLO's AUTH
// option: the default user's password (--requirepass-file), and the named
// users' (the gateway principals of --credentials, each with its secret):
//
//   PasswordCheck check(requirepass, {{"gw-a", "secret-of-gw-a"}});
//   uint64_t retry_ms = 0;
//   switch (check.Check(peer_address, user, password, MonoMs(), &retry_ms)) ...
//
// The password is compared in time that depends on neither its bytes nor
// its length (the SHA-256 digests of both are compared with CRYPTO_memcmp),
// and an unknown user name costs the same comparison as a known one.
// After a failure, the client's address (the peer without its port) is
// refused for a back-off that doubles with each consecutive failure, from
// kBackoffFirstMs to kBackoffMaxMs; an attempt during the back-off is
// answered without looking at its password and does not extend it. A
// success clears the address's record. So one address guesses at most one
// password per kBackoffMaxMs once it has failed a few times.
#ifndef SHELF_SERVER_RESP_RESP_AUTH_H_
#define SHELF_SERVER_RESP_RESP_AUTH_H_

#include <cstdint>
#include <map>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/strings/string_view.h"
#include "common/mutex.h"

namespace shelf::resp {

class PasswordCheck {
 public:
  static constexpr uint64_t kBackoffFirstMs = 100;
  static constexpr uint64_t kBackoffMaxMs = 10000;
  // Addresses whose failures are remembered at once; past it, the record
  // of the least recent failure is forgotten first.
  static constexpr size_t kAddressesMax = 65536;
  // An address with no failure for this long starts again from the first
  // back-off.
  static constexpr uint64_t kForgetAfterMs = uint64_t{10} * 60 * 1000;

  enum class Verdict { kOk, kWrongPass, kBackoff };

  // `password` empty: the default user needs none (its Check passes).
  // `users`: the named users and their passwords (none empty).
  explicit PasswordCheck(absl::string_view password,
                         const std::map<std::string, std::string>& users = {});
  PasswordCheck(const PasswordCheck&) = delete;
  PasswordCheck& operator=(const PasswordCheck&) = delete;

  // Whether a client must authenticate before it runs commands: the
  // default user has a password.
  bool required() const { return required_; }

  // Checks `user` ("default", or a named user) and `password` for a client
  // at `peer` (HOST:PORT, or "unix") at monotonic time `now_ms`. kBackoff:
  // *retry_ms is how long the address must wait. With no password at all
  // (none for the default user, no named user) every Check passes.
  Verdict Check(absl::string_view peer, absl::string_view user, absl::string_view password,
                uint64_t now_ms, uint64_t* retry_ms);

 private:
  struct Failures {
    uint32_t count = 0;
    uint64_t last_ms = 0;   // the latest failure
    uint64_t until_ms = 0;  // refused before this
  };
  static std::string AddressOf(absl::string_view peer);
  void ForgetOneLocked() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const bool required_;
  const std::string digest_;                             // SHA-256 of the default user's password
  absl::flat_hash_map<std::string, std::string> users_;  // name -> SHA-256 of its password

  Mutex mu_;
  absl::flat_hash_map<std::string, Failures> failures_ ABSL_GUARDED_BY(mu_);
};

}  // namespace shelf::resp

#endif  // SHELF_SERVER_RESP_RESP_AUTH_H_
