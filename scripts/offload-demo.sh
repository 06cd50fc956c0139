#!/usr/bin/env bash
# The programmable offloading engine's two examples between two hosts of the lab (issue 21,
# docs/offload.md): `sluice offload-demo server` in sluice-e on sl-e (10.77.0.4) runs an RDMA
# stack with the offload engine and the batched READ and list traversal handlers;
# `sluice offload-demo client` in sluice-a on sl-a (10.77.0.1) measures both against its own
# baseline (one RDMA READ per hop / per item) over the wire and prints the table. Root (the
# lab). QUICK=1 for the small sizes.
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "offload-demo: run as root (the lab needs namespaces)" >&2; exit 1; }
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release -q -p sluice-cli
  SLUICE_BIN=target/release/sluice
fi
bin=$(realpath "$SLUICE_BIN")
quick=()
[ -n "${QUICK:-}" ] && quick=(--quick)
server=""
cleanup() {
  [ -n "$server" ] && kill "$server" 2>/dev/null || true
  wait 2>/dev/null || true
  "$bin" lab down >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$bin" lab up
ip netns exec sluice-e "$bin" offload-demo server --iface sl-e --ip 10.77.0.4 \
  --peer-ip 10.77.0.1 --seconds 600 >/tmp/offload-demo-server.log 2>&1 &
server=$!
sleep 0.5
if ! timeout 600 ip netns exec sluice-a "$bin" offload-demo client --iface sl-a --ip 10.77.0.1 \
  --peer-ip 10.77.0.4 "${quick[@]}"; then
  echo "offload-demo: the client failed; the server said:" >&2
  cat /tmp/offload-demo-server.log >&2
  exit 1
fi
