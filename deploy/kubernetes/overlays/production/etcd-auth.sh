#!/bin/sh
# Turns on etcd's authentication for Shelf, once, after the etcd members are
# up (docs/operations.md, "etcd users"): the masters may read and write the
# cluster's keys, the stores may only read them (they only find the leader).
# etcd takes a client certificate's common name (CN) as its user, so the
# masters' certificate (Secret shelf-etcd-client) must have CN shelf-master
# and the stores' (Secret shelf-etcd-store-client) CN shelf-store.
#
# etcdctl finds etcd, and the certificate to present, in its environment:
#   ETCDCTL_ENDPOINTS  e.g. https://127.0.0.1:2379 (kubectl port-forward etcd-0 2379)
#   ETCDCTL_CACERT     etcd's CA
#   ETCDCTL_CERT, ETCDCTL_KEY
#                      a client certificate from etcd's CA with CN root: until
#                      authentication is on any certificate of the CA may do
#                      everything; after, this one alone administers etcd.
# Users authenticate by certificate; each password is random and thrown
# away. Running it again changes nothing.
set -eu
: "${ETCDCTL_ENDPOINTS:?}" "${ETCDCTL_CACERT:?}" "${ETCDCTL_CERT:?}" "${ETCDCTL_KEY:?}"
export ETCDCTL_API=3
prefix=/shelf/

password() { head -c 24 /dev/urandom | base64; }

# user NAME PERMISSION: a user NAME with a role NAME granted PERMISSION
# (read or readwrite) on every key under $prefix.
user() {
  etcdctl user get "$1" >/dev/null 2>&1 || etcdctl user add "$1" --new-user-password="$(password)"
  etcdctl role get "$1" >/dev/null 2>&1 || etcdctl role add "$1"
  etcdctl role grant-permission "$1" --prefix=true "$2" "$prefix"
  etcdctl user grant-role "$1" "$1"
}

# root must exist before `auth enable`, which gives it the role root.
etcdctl user get root >/dev/null 2>&1 || etcdctl user add root --new-user-password="$(password)"
user shelf-master readwrite
user shelf-store read
etcdctl auth enable
