#!/usr/bin/env bash
# Linux's kernel memory per idle TCP connection, the row beside `sluice experiment million`
# in docs/notes/issue-18/million.md (issue 18 item 3). Needs root.
#
#   scripts/linux-million.sh [CONNS]      # default 100000
#
# Two network namespaces, s9m-srv (10.99.0.1) and s9m-cli (one source address per 60,000
# connections), joined by a veth pair. Both take the smallest socket buffers
# (net.ipv4.tcp_rmem and tcp_wmem "4096 4096 4096", per namespace). A Python server accepts
# CONNS connections and holds them; a Python client opens them and holds its ends. The
# kernel's memory is read before and after, with the connections idle:
#   - /proc/meminfo Slab (every slab cache: sockets, inodes, files, dentries, ...),
#   - /proc/net/sockstat TCP "mem" (pages of socket buffers, global),
#   - /proc/slabinfo for the TCP-related caches, object by object.
# Both ends of every connection are Linux sockets in this one kernel, so the per-socket
# figure (the server side's cost of one connection) is the delta over 2 x CONNS.
# Takes /run/sluice-lab.lock while the namespaces exist; deletes them on exit.
set -euo pipefail

CONNS=${1:-100000}
NS_S=s9m-srv
NS_C=s9m-cli
PER_IP=60000
PORT=7000

[ "$(id -u)" = 0 ] || { echo "linux-million: needs root" >&2; exit 1; }
# One descriptor per socket: a process may hold only `ulimit -Hn` of them (20,000 here, and
# root in a container may not raise it), so the connections are split over GROUPS pairs
# of server and client processes, one port each.
PER_PROC=$(( $(ulimit -Hn) - 256 ))
GROUPS_N=$(( (CONNS + PER_PROC - 1) / PER_PROC ))
exec 9>/run/sluice-lab.lock
flock 9

PIDS=()
cleanup() {
    for p in "${PIDS[@]}"; do kill "$p" 2>/dev/null || true; done
    wait 2>/dev/null || true
    ip netns del "$NS_C" 2>/dev/null || true
    ip netns del "$NS_S" 2>/dev/null || true
}
trap cleanup EXIT

ip netns add "$NS_S"
ip netns add "$NS_C"
ip link add s9m-a netns "$NS_S" type veth peer name s9m-b netns "$NS_C"
ip -n "$NS_S" addr add 10.99.0.1/16 dev s9m-a
IPS=$(( (CONNS + PER_IP - 1) / PER_IP ))
for i in $(seq 1 "$IPS"); do
    ip -n "$NS_C" addr add "10.99.1.$i/16" dev s9m-b
done
for ns in "$NS_S" "$NS_C"; do
    ip -n "$ns" link set lo up
    ip netns exec "$ns" sysctl -qw net.ipv4.tcp_rmem="4096 4096 4096" \
        net.ipv4.tcp_wmem="4096 4096 4096" net.core.somaxconn=65535 \
        net.ipv4.tcp_max_syn_backlog=65535 net.ipv4.ip_local_port_range="1024 65000"
done
ip -n "$NS_S" link set s9m-a up
ip -n "$NS_C" link set s9m-b up

# One reading: Slab kB, sockstat TCP mem pages, and "name:bytes" of the TCP-related caches.
snapshot() {
    python3 - <<'EOF'
import re
slab = next(int(l.split()[1]) for l in open('/proc/meminfo') if l.startswith('Slab:'))
sock = open('/proc/net/sockstat').read()
mem = int(re.search(r'TCP: .* mem (\d+)', sock).group(1))
caches = {}
for l in open('/proc/slabinfo').readlines()[2:]:
    f = l.split()
    if f[0] in ('TCP', 'sock_inode_cache', 'filp', 'dentry', 'request_sock_TCP',
                'tcp_bind_bucket', 'tcp_bind2_bucket', 'inet_peer_cache', 'eventpoll_epi',
                'kmalloc-64', 'kmalloc-128', 'kmalloc-192', 'kmalloc-256', 'kmalloc-512',
                'kmalloc-1k', 'kmalloc-2k', 'kmalloc-4k'):
        caches[f[0]] = int(f[1]) * int(f[3])
print(slab, mem, ' '.join(f'{k}:{v}' for k, v in sorted(caches.items())))
EOF
}

# argv: the group's port and its connections (and, for the client, its first index).
SERVER=$(cat <<EOF
import socket, sys, time
port, n = int(sys.argv[1]), int(sys.argv[2])
l = socket.socket()
l.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
l.bind(('10.99.0.1', port))
l.listen(65535)
print('listening', flush=True)
held = []
while len(held) < n:
    held.append(l.accept()[0])
print('accepted', len(held), flush=True)
time.sleep(3600)
EOF
)
CLIENT=$(cat <<EOF
import socket, sys, time
port, n, first = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
held = []
for k in range(first, first + n):
    s = socket.socket()
    # An explicit port: bind(addr, 0) searches the bound ports, slower with each socket.
    s.bind(('10.99.1.%d' % (k // $PER_IP + 1), 1024 + k % $PER_IP))
    s.connect(('10.99.0.1', port))
    held.append(s)
print('connected', len(held), flush=True)
time.sleep(3600)
EOF
)

sync
sleep 1
read -r SLAB0 MEM0 CACHES0 < <(snapshot)
# Waits (at most 10 minutes) for a line starting with $1 in file $2.
wait_for() {
    for _ in $(seq 6000); do
        grep -q "^$1" "$2" 2>/dev/null && return 0
        sleep 0.1
    done
    echo "linux-million: no '$1' in $2" >&2
    exit 1
}

OUT=$(mktemp -d)
CONNECTED=0
ACCEPTED=0
for g in $(seq 0 $((GROUPS_N - 1))); do
    first=$((g * PER_PROC))
    n=$(( CONNS - first < PER_PROC ? CONNS - first : PER_PROC ))
    ip netns exec "$NS_S" python3 -c "$SERVER" $((PORT + g)) "$n" > "$OUT/s$g" &
    PIDS+=($!)
    wait_for listening "$OUT/s$g"
    ip netns exec "$NS_C" python3 -c "$CLIENT" $((PORT + g)) "$n" "$first" > "$OUT/c$g" &
    PIDS+=($!)
    wait_for connected "$OUT/c$g"
    wait_for accepted "$OUT/s$g"
    c=$(awk '/^connected/ {print $2}' "$OUT/c$g")
    a=$(awk '/^accepted/ {print $2}' "$OUT/s$g")
    CONNECTED=$((CONNECTED + c))
    ACCEPTED=$((ACCEPTED + a))
done
rm -rf "$OUT"
sleep 2
read -r SLAB1 MEM1 CACHES1 < <(snapshot)

python3 - "$CONNS" "$CONNECTED" "$ACCEPTED" "$SLAB0" "$SLAB1" "$MEM0" "$MEM1" \
    "$CACHES0" "$CACHES1" <<'EOF'
import sys
conns, connected, accepted = (int(x) for x in sys.argv[1:4])
slab0, slab1, mem0, mem1 = (int(x) for x in sys.argv[4:8])
c0 = dict((k, int(v)) for k, v in (p.split(':') for p in sys.argv[8].split()))
c1 = dict((k, int(v)) for k, v in (p.split(':') for p in sys.argv[9].split()))
sockets = 2 * conns
slab = (slab1 - slab0) * 1024
mem = (mem1 - mem0) * 4096
print(f'linux: {conns} connections (client connected {connected}, server accepted {accepted}), '
      f'{sockets} sockets, tcp_rmem/tcp_wmem 4096')
print(f'slab delta {slab / 2**20:.1f} MiB, socket buffers (sockstat mem) delta {mem / 2**20:.1f} MiB')
print(f'per socket: {(slab + mem) / sockets:.0f} B (slab {slab / sockets:.0f} B + buffers '
      f'{mem / sockets:.0f} B)')
for k in sorted(c1):
    d = c1[k] - c0.get(k, 0)
    if d > 0:
        print(f'  {k:18} {d / sockets:8.0f} B/socket')
EOF
