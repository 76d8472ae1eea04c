#!/bin/sh
# Init step of the shelf-store pod: turns the labels of the Node the pod runs
# on into the store's --labels (zone=...,rack=...), written to $OUT. The
# downward API exposes the node's name but not its labels, so this asks the
# API server, with the pod's service account (RBAC: get nodes).
#
# LABEL_MAP: comma-separated NAME=NODE_LABEL pairs, e.g.
#   zone=topology.kubernetes.io/zone,rack=topology.kubernetes.io/rack
set -eu
: "${NODE_NAME:?}" "${OUT:?}"
sa=/var/run/secrets/kubernetes.io/serviceaccount
node_json=$(curl -fsS --max-time 10 --cacert "$sa/ca.crt" \
  -H "Authorization: Bearer $(cat "$sa/token")" \
  "https://kubernetes.default.svc/api/v1/nodes/$NODE_NAME")
labels="node=$NODE_NAME"
old_ifs=$IFS
IFS=,
for pair in ${LABEL_MAP:-}; do
  name=${pair%%=*}
  key=${pair#*=}
  value=$(printf '%s' "$node_json" | jq -r --arg k "$key" '.metadata.labels[$k] // empty')
  if [ -n "$value" ]; then
    labels="$labels,$name=$value"
  fi
done
IFS=$old_ifs
printf '%s\n' "$labels" > "$OUT.tmp"
mv "$OUT.tmp" "$OUT"
echo "shelf-store labels: $labels"
