// The command-line flags that secure a process's connection to etcd, one
// definition for shelf-master, shelf-store, shelf-resp and shelfctl:
//
//   coord::EtcdOptions etcd_options;
//   coord::AddEtcdFlags(&flags, &etcd_options);
//   flags.ParseOrExit(argc, argv);
//   auto etcd = coord::EtcdClient::Connect(endpoints, etcd_options);
//
// --etcd-ca, --etcd-cert, --etcd-key and --etcd-user-file fill the matching
// EtcdOptions fields (docs/security.md, "etcd").
#ifndef SHELF_COORD_ETCD_FLAGS_H_
#define SHELF_COORD_ETCD_FLAGS_H_

#include "common/flags.h"
#include "coord/etcd_client.h"

namespace shelf::coord {

// `options` must outlive the parse.
void AddEtcdFlags(Flags* flags, EtcdOptions* options);

}  // namespace shelf::coord

#endif  // SHELF_COORD_ETCD_FLAGS_H_
