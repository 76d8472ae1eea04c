// What the language bindings (the pybind11 module, the Mooncake layer)
// read from their callers' arguments into ClientOptions: a master list in
// one string, and whether the principal a client's credentials name
// belongs to a tenant it asks for. Internal to libshelf.
#ifndef SHELF_CLIENT_BINDING_OPTIONS_H_
#define SHELF_CLIENT_BINDING_OPTIONS_H_

#include <string>
#include <vector>

#include "shelf/client.h"

namespace shelf {

// "HOST:PORT,HOST:PORT" (or one etcd:// spec) as ClientOptions::masters:
// the non-empty fields between any of `separators`.
std::vector<std::string> SplitMasters(const std::string& masters, const char* separators = ",");

// Whether the principal `o` names (its credentials file's only one when
// `o.principal` is empty) belongs to `tenant`; "default" is any tenant.
// False when the file cannot be read. A client cannot choose a tenant its
// credentials do not give it.
bool PrincipalHasTenant(const ClientOptions& o, const std::string& tenant);

}  // namespace shelf

#endif  // SHELF_CLIENT_BINDING_OPTIONS_H_
