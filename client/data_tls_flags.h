// The command-line flags with which a client tool reaches stores that serve
// their data plane over TLS (shelf-store --data-tls), one definition for
// shelf-resp and shelfctl:
//
//   ClientOptions options;
//   AddDataTlsClientFlags(&flags, &options);
//   flags.ParseOrExit(argc, argv);
//   if (absl::Status s = CheckDataTlsClientFlags(options); !s.ok()) ...
//
// --data-tls, --data-tls-ca, --data-tls-cert and --data-tls-key fill the
// matching ClientOptions fields (docs/security.md, "Data plane").
#ifndef SHELF_CLIENT_DATA_TLS_FLAGS_H_
#define SHELF_CLIENT_DATA_TLS_FLAGS_H_

#include <string>

#include "absl/status/status.h"
#include "common/flags.h"
#include "shelf/client.h"

namespace shelf {

// `options` must outlive the parse.
inline void AddDataTlsClientFlags(Flags* flags, ClientOptions* options) {
  flags->AddBool("data-tls", &options->data_tls,
                 "TLS 1.3 to the stores' data plane (stores run with --data-tls); needs "
                 "--data-tls-ca");
  flags->AddString("data-tls-ca", &options->data_tls_ca,
                   "PEM CA bundle that signed the stores' data-plane certificates");
  flags->AddString("data-tls-cert", &options->data_tls_cert,
                   "PEM client certificate for stores that require one (their --data-tls-ca)");
  flags->AddString("data-tls-key", &options->data_tls_key, "PEM private key of --data-tls-cert");
}

// The flags' own consistency, in their names, before a client is opened.
inline absl::Status CheckDataTlsClientFlags(const ClientOptions& options) {
  const bool any_file = !options.data_tls_ca.empty() || !options.data_tls_cert.empty() ||
                        !options.data_tls_key.empty();
  if (any_file && !options.data_tls) {
    return absl::InvalidArgumentError(
        "--data-tls-ca/--data-tls-cert/--data-tls-key are for --data-tls, which is not set");
  }
  if (options.data_tls && options.data_tls_ca.empty()) {
    return absl::InvalidArgumentError(
        "--data-tls needs --data-tls-ca, the CA that signed the stores' certificates");
  }
  if (options.data_tls_cert.empty() != options.data_tls_key.empty()) {
    return absl::InvalidArgumentError("--data-tls-cert and --data-tls-key go together");
  }
  return absl::OkStatus();
}

}  // namespace shelf

#endif  // SHELF_CLIENT_DATA_TLS_FLAGS_H_
