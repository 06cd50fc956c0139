#!/usr/bin/env bash
# Unmodified perftest over Sluice's RDMA verbs, between two engines in the lab (issue 16):
# engine A in sluice-a (10.77.0.1), engine E in sluice-e (10.77.0.4). Each perftest program
# runs under `sluice run --verbs`: its verbs go to its engine's RoCEv2 transport through the
# Sluice provider (device sluice0), its TCP connection exchange (port 18515) through the
# engine's TCP. Prints perftest's own result tables. Root (the lab).
#
#   scripts/verbs-demo.sh [PROGRAM...]     default: ib_write_bw ib_read_lat ib_send_lat
#   ITERS=1000 SIZE=65536 scripts/verbs-demo.sh ib_write_bw
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" -eq 0 ] || { echo "verbs-demo: run as root (the lab needs namespaces)" >&2; exit 1; }
for tool in ib_write_bw ib_read_lat ib_send_lat; do
  command -v "$tool" >/dev/null || { echo "verbs-demo: $tool missing (apt-get install perftest)" >&2; exit 1; }
done
if [ -z "${SLUICE_BIN:-}" ]; then
  cargo build --release -q -p sluice-cli -p sluice-preload -p sluice-verbs-provider
  SLUICE_BIN=target/release/sluice
fi
bin=$(realpath "$SLUICE_BIN")
programs=("$@")
[ ${#programs[@]} -gt 0 ] || programs=(ib_write_bw ib_read_lat ib_send_lat)
iters=${ITERS:-1000}
sock_a=/run/sluice/verbs-a.sock
sock_e=/run/sluice/verbs-e.sock
pids=()
cleanup() {
  for p in "${pids[@]}"; do kill "$p" 2>/dev/null || true; done
  wait 2>/dev/null || true
  "$bin" lab down >/dev/null 2>&1 || true
}
trap cleanup EXIT
"$bin" lab up
"$bin" engine --lab --socket "$sock_a" --idle-us 20 --app-idle-us 200 >/tmp/verbs-demo-a.log 2>&1 &
pids+=($!)
ip netns exec sluice-e "$bin" engine --iface sl-e --ip 10.77.0.4/24 --socket "$sock_e" \
  --idle-us 20 --app-idle-us 200 >/tmp/verbs-demo-e.log 2>&1 &
pids+=($!)
for s in "$sock_a" "$sock_e"; do
  for _ in $(seq 100); do [ -S "$s" ] && break; sleep 0.05; done
  [ -S "$s" ] || { echo "verbs-demo: no engine at $s" >&2; cat /tmp/verbs-demo-*.log >&2; exit 1; }
done
for prog in "${programs[@]}"; do
  args=(-d sluice0 -x 0 -F -n "$iters")
  [ -n "${SIZE:-}" ] && args+=(-s "$SIZE")
  echo "== $prog ${args[*]} (server on engine E, client on engine A)"
  ip netns exec sluice-e "$bin" run --verbs --socket "$sock_e" -- "$prog" "${args[@]}" \
    >/tmp/verbs-demo-server.log 2>&1 &
  server=$!
  sleep 1
  if ! timeout 60 "$bin" run --lab --verbs --socket "$sock_a" -- "$prog" "${args[@]}" 10.77.0.4; then
    echo "verbs-demo: $prog failed; the server said:" >&2
    cat /tmp/verbs-demo-server.log >&2
    kill "$server" 2>/dev/null || true
    exit 1
  fi
  wait "$server" || { echo "verbs-demo: the $prog server failed:" >&2; cat /tmp/verbs-demo-server.log >&2; exit 1; }
done
