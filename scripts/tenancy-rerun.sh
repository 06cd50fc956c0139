#!/usr/bin/env bash
# Issue 23's four failures, rerun the way the issue found them, for its closing note: one
# table row per failure, what the issue saw beside what this run sees. Needs root and the
# lab (`sluice lab up` is run here and `sluice lab down` at the end); takes
# /run/sluice-lab.lock. Quota flags another branch adds are used when `sluice engine --help`
# has them, so the same script reruns before and after they merge.
#
#   scripts/tenancy-rerun.sh [SLUICE]   # default target/release/sluice, else target/debug/sluice
#
# 1. attaches: uid 65534 (in the engine's group) starts ATTACHES programs under `sluice run`,
#    each attaching once, while root's echo server answers a Linux client's 64 B round trips
#    (max before and during the attaches); then a new server binds and serves and a new
#    `sluice run` client connects out, each checked byte for byte.
# 2. listeners: one program of uid 65534 listens on up to 300 ports; then root's server listens.
# 3. the socket's owner and mode; uid 65534 binds 22, 80 and 443; a Linux client in sluice-k
#    connects to 22; the same uid outside the group binds 8081.
# 4. 500 fetches of a 100 KB file from `python3 -m http.server` on Linux (sluice-k) and over
#    the engine, from sluice-b: the slowest of each (bound: max(20 x Linux p99, 500 ms)).
set -euo pipefail

cd "$(dirname "$0")/.."
SLUICE=${1:-}
if [ -z "$SLUICE" ]; then
    SLUICE=target/release/sluice
    [ -x "$SLUICE" ] || SLUICE=target/debug/sluice
fi
SLUICE=$(realpath "$SLUICE")
[ -x "$SLUICE" ] || { echo "tenancy-rerun: no sluice binary at $SLUICE" >&2; exit 1; }
[ "$(id -u)" = 0 ] || { echo "tenancy-rerun: needs root" >&2; exit 1; }
PY=$(realpath crates/cli/tests/preload)
ATTACHES=${ATTACHES:-30}
GROUP=sluice-test
USER_ID=65534
ENGINE_IP=10.77.0.1
LINUX_IP=10.77.0.3

exec 9>/run/sluice-lab.lock
flock 9

DIR=$(mktemp -d /tmp/sluice-rerun.XXXXXX)
chmod 755 "$DIR"
SOCK=$DIR/engine.sock
PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    "$SLUICE" lab down >/dev/null 2>&1 || true
    rm -rf "$DIR"
}
trap cleanup EXIT
trap 'exit 1' INT TERM

# wait_line FILE PATTERN [SECONDS]: until FILE has a line matching PATTERN.
wait_line() {
    local i
    for ((i = 0; i < ${3:-60} * 10; i++)); do
        grep -q -- "$2" "$1" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "tenancy-rerun: no '$2' in $1:" >&2
    cat "$1" >&2
    return 1
}
# Prefixes that run a program under `sluice run`: as uid 65534 in the group, outside it, as
# root. Plain commands (no functions), so that a background job's pid is the program's.
AS_USER=(ip netns exec sluice-a setpriv --reuid=$USER_ID --regid=$USER_ID)
AS_ROOT=("$SLUICE" run --lab --socket "$SOCK" --)
# start NAME CMD...: in the background, output in $DIR/NAME.log; the lock's descriptor is
# not inherited, so that a leftover program cannot hold the lab.
start() {
    local name=$1
    shift
    "$@" >"$DIR/$name.log" 2>&1 9>&- &
    PIDS+=($!)
}
# echo_check PORT [NS] [HOST]: one Linux client's 100 KB echoed byte for byte; prints ok or failed.
echo_check() {
    if timeout 60 ip netns exec "${2:-sluice-b}" python3 "$PY/client.py" "${3:-$ENGINE_IP}" "$1" 1 100000 \
        2>&1 | grep -q '^ok 1 100000'; then echo ok; else echo failed; fi
}

groupadd -f "$GROUP"
GID=$(getent group "$GROUP" | cut -d: -f3)
IN_GROUP=("${AS_USER[@]}" --groups="$GID" -- "$SLUICE" run --socket "$SOCK" --)
OUTSIDE=("${AS_USER[@]}" --clear-groups -- "$SLUICE" run --socket "$SOCK" --)
"$SLUICE" lab up >/dev/null
flags=()
help=$("$SLUICE" engine --help)
grep -q -- --apps-per-uid <<<"$help" && flags+=(--apps-per-uid 8)
grep -q -- --listeners-per-app <<<"$help" && flags+=(--listeners-per-app 16)
start engine "$SLUICE" engine --lab --socket "$SOCK" --group "$GROUP" "${flags[@]}"
ENGINE_PID=${PIDS[-1]}
wait_line "$DIR/engine.log" ready

ROWS=()
row() { ROWS+=("$(printf '| %s | %s | %s |' "$1" "$2" "$3")"); }

# ---- 1: attaches of one uid ----
cat >"$DIR/ping.py" <<'EOF'
import socket, sys, time, os
s = socket.create_connection((sys.argv[1], int(sys.argv[2])), timeout=30)
s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
rtts, msg = [], b"x" * 64
while not os.path.exists(sys.argv[3]):
    t0 = time.monotonic()
    s.sendall(msg)
    got = b""
    while len(got) < 64:
        got += s.recv(64 - len(got))
    rtts.append(time.monotonic() - t0)
    time.sleep(0.001)
rtts.sort()
print(f"rtts {len(rtts)} max_ms {rtts[-1]*1e3:.2f} p99_ms {rtts[len(rtts)*99//100]*1e3:.2f}", flush=True)
EOF
start echo7000 "${AS_ROOT[@]}" python3 "$PY/tenant.py" echo 7000
wait_line "$DIR/echo7000.log" listening
start ping-before ip netns exec sluice-b python3 "$DIR/ping.py" $ENGINE_IP 7000 "$DIR/stop-before"
sleep 3
touch "$DIR/stop-before"
wait_line "$DIR/ping-before.log" rtts
start ping-during ip netns exec sluice-b python3 "$DIR/ping.py" $ENGINE_IP 7000 "$DIR/stop-during"
attached=0
refused=""
ATTACH_PIDS=()
for ((i = 0; i < ATTACHES; i++)); do
    start "attach$i" "${IN_GROUP[@]}" python3 "$PY/tenant.py" attach
    ATTACH_PIDS+=("${PIDS[-1]}")
    wait_line "$DIR/attach$i.log" holding
    if grep -q '^attached' "$DIR/attach$i.log"; then
        attached=$((attached + 1))
    else
        refused="$refused $(sed -n 's/^refused //p' "$DIR/attach$i.log")"
    fi
done
touch "$DIR/stop-during"
wait_line "$DIR/ping-during.log" rtts
start echo7001 "${AS_ROOT[@]}" python3 "$PY/tenant.py" echo 7001
if wait_line "$DIR/echo7001.log" listening 30 2>/dev/null; then
    server=$(echo_check 7001)
else
    server="failed: $(tail -1 "$DIR/echo7001.log")"
fi
start linux7002 ip netns exec sluice-k python3 "$PY/tenant.py" echo 7002
wait_line "$DIR/linux7002.log" listening
if timeout 60 "${AS_ROOT[@]}" python3 "$PY/client.py" $LINUX_IP 7002 1 100000 \
    2>&1 | grep -q '^ok 1 100000'; then client=ok; else client=failed; fi
refusals=$(tr ' ' '\n' <<<"$refused" | sed '/^$/d' | sort | uniq -c | awk '{printf "%s %s ", $1, $2}')
row "1. attaches of one uid" \
    "29 attaches, then every attach ENOMEM; new server's bind and client's connect ECONNREFUSED; RTT max 124 ms" \
    "$ATTACHES tried: $attached attached${refusals:+, refused: $refusals}; new server $server, new client $client; RTT max $(sed -n 's/.*max_ms \([0-9.]*\).*/\1/p' "$DIR/ping-before.log") ms before, $(sed -n 's/.*max_ms \([0-9.]*\).*/\1/p' "$DIR/ping-during.log") ms during"
# The next rows start without them, as the issue's did.
kill "${ATTACH_PIDS[@]}" 2>/dev/null || true

# ---- 2: one app's listeners ----
start listeners "${IN_GROUP[@]}" python3 "$PY/tenant.py" listen-until 20000 300
echo "${PIDS[-1]}" >"$DIR/listeners.pid"
wait_line "$DIR/listeners.log" holding
held=$(sed -n 's/^listeners //p' "$DIR/listeners.log")
why=$(sed -n 's/^refused //p' "$DIR/listeners.log")
start echo7003 "${AS_ROOT[@]}" python3 "$PY/tenant.py" echo 7003
if wait_line "$DIR/echo7003.log" listening 30 2>/dev/null; then
    server=$(echo_check 7003)
else
    server="failed: $(grep -m1 -i error "$DIR/echo7003.log" || tail -1 "$DIR/echo7003.log")"
fi
row "2. one app's listeners" \
    "62 listeners, then a well-behaved listen() ENOBUFS" \
    "$held listeners${why:+, then $why}; a new server's listen: $server"
kill "${PIDS[-1]}" "$(cat "$DIR/listeners.pid")" 2>/dev/null || true

# ---- 3: who may attach, privileged ports ----
mode=$(stat -c '%U:%G %a' "$SOCK")
start ports "${IN_GROUP[@]}" python3 "$PY/tenant.py" bind 22 80 443
wait_line "$DIR/ports.log" holding
binds=$(grep '^port ' "$DIR/ports.log" | sed 's/^port //; s/ errno / /' | paste -sd, -)
reach=$(timeout 30 ip netns exec sluice-k python3 -c "
import socket
try:
    socket.create_connection(('$ENGINE_IP', 22), timeout=10).close(); print('reached')
except ConnectionRefusedError:
    print('refused')
except OSError as e:
    print(e)")
start outside "${OUTSIDE[@]}" python3 "$PY/tenant.py" bind 8081
wait_line "$DIR/outside.log" holding
outside=$(sed -n 's/^port 8081 //p' "$DIR/outside.log")
row "3. who may attach, ports" \
    "socket root 0755 (users cannot attach); opened 0666, any uid bound 22/80/443 and got port 22's clients" \
    "socket $mode; uid $USER_ID in $GROUP binds $binds; client to :22 $reach; outside the group: $outside"

# ---- 4: http.server fetches ----
head -c 100000 /dev/urandom >"$DIR/page.bin"
chmod 644 "$DIR/page.bin"
serve=(python3 -u -m http.server --bind 0.0.0.0 --directory "$DIR" 8000)
start linux-http ip netns exec sluice-k "${serve[@]}"
start engine-http "${AS_ROOT[@]}" "${serve[@]}"
fetch() {
    timeout 600 ip netns exec sluice-b python3 "$PY/fetch_loop.py" "$1" 8000 page.bin 500 |
        sed -n 's/^ok 500 //p'
}
linux_max="" engine_max=""
if wait_line "$DIR/linux-http.log" "Serving HTTP"; then
    read -r linux_max linux_p99 <<<"$(fetch $LINUX_IP)" || true
fi
if wait_line "$DIR/engine-http.log" "Serving HTTP"; then
    read -r engine_max engine_p99 <<<"$(fetch $ENGINE_IP)" || true
fi
row "4. http.server stalls" \
    "stalls of 0.5-2.9 s after a fast connect, one fetch timed out after 5 s" \
    "500 fetches each: slowest ${engine_max:-failed} s over the engine (p99 ${engine_p99:-?} s), ${linux_max:-failed} s on Linux (p99 ${linux_p99:-?} s)"

kill "$ENGINE_PID"
wait "$ENGINE_PID" 2>/dev/null || true
counters=$(grep -E '^(apps_attached|apps_denied|privileged_ports_refused|accept_queue_overflow|apps_refused[a-z_]*|listeners_refused[a-z_]*) ' "$DIR/engine.log" |
    awk '{printf "%s %s, ", $1, $2}')

echo "engine flags: --group $GROUP ${flags[*]:-(no quota flags in this build)}"
echo "| failure | the issue saw | this run |"
echo "|---|---|---|"
printf '%s\n' "${ROWS[@]}"
echo "engine counters: ${counters%, }"
