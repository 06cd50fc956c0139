#!/usr/bin/env bash
# Installs what the build needs on a fresh Debian machine (Rust is assumed present).
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v c++ >/dev/null 2>&1 || need+=(g++)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# The namespace lab (crates/lab) drives ip, sysctl and ethtool; its tests ping across it.
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
command -v sysctl >/dev/null 2>&1 || [ -x /usr/sbin/sysctl ] || [ -x /sbin/sysctl ] || need+=(procps)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || [ -x /sbin/ethtool ] || need+=(ethtool)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
# Linux peers in the lab's interop tests are small Python socket programs.
command -v python3 >/dev/null 2>&1 || need+=(python3)
# The RoCEv2 wire format is checked against tshark's dissector and scapy's ICRC
# (crates/rdma/tests/tshark.rs, scapy.rs).
command -v tshark >/dev/null 2>&1 || need+=(tshark)
pkg_ok() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
pkg_ok python3-scapy || need+=(python3-scapy)
# The AF_XDP backend (xsk-rs) builds libxdp and libbpf from source: clang compiles libxdp's
# BPF programs and bindgen loads libclang, llc and m4 are libxdp's build tools; libbpf-dev
# is what libxdp's configure finds (without it, it demands libpcap); libelf and zlib link in.
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v llc >/dev/null 2>&1 || need+=(llvm)
command -v m4 >/dev/null 2>&1 || need+=(m4)
for p in libbpf-dev libelf-dev zlib1g-dev; do pkg_ok "$p" || need+=("$p"); done
# `sluice capture` compiles tcpdump's filter language with libpcap (the pcap crate links it).
pkg_ok libpcap-dev || need+=(libpcap-dev)
# The ns-3 module (ns3/, scripts/ns3.sh, crates/ffi/tests/ns3_dumbbell.rs) builds against
# Debian's ns-3 3.37, whose pkg-config files name libgsl, libsqlite3 and libxml2's headers.
for p in libns3-dev libgsl-dev libsqlite3-dev libxml2-dev; do pkg_ok "$p" || need+=("$p"); done
command -v make >/dev/null 2>&1 || need+=(make)
# `sluice experiment` draws its PNG plots with plotters, whose text goes through fontconfig
# and FreeType and needs a font at run time.
for p in libfontconfig1-dev libfreetype-dev fonts-dejavu-core; do pkg_ok "$p" || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi
# Unmodified programs run over the engine and on Linux side by side (crates/bench/src/apps,
# `sluice bench apps`, crates/cli/tests/apps.rs), with their benchmark clients.
apps=()
command -v redis-server >/dev/null 2>&1 || apps+=(redis-server)
command -v redis-benchmark >/dev/null 2>&1 || apps+=(redis-tools)
command -v memcached >/dev/null 2>&1 || [ -x /usr/bin/memcached ] || apps+=(memcached)
command -v nginx >/dev/null 2>&1 || [ -x /usr/sbin/nginx ] || apps+=(nginx-light)
command -v wrk >/dev/null 2>&1 || apps+=(wrk)
# The L7 proxies `sluice experiment proxy` measures `sluice proxy` against.
command -v haproxy >/dev/null 2>&1 || [ -x /usr/sbin/haproxy ] || apps+=(haproxy)
[ -e /usr/lib/nginx/modules/ngx_stream_module.so ] || apps+=(libnginx-mod-stream)
command -v iperf3 >/dev/null 2>&1 || apps+=(iperf3)
command -v curl >/dev/null 2>&1 || apps+=(curl)
# RDMA verbs (issue 16): unmodified libibverbs programs over Sluice's provider.
pkg_ok libibverbs-dev || apps+=(libibverbs-dev)
command -v ibv_devices >/dev/null 2>&1 || apps+=(ibverbs-utils)
command -v ib_write_bw >/dev/null 2>&1 || apps+=(perftest)
# `sluice bench verbs`: sockperf ping-pong is its TCP latency baseline; `sluice bench` runs
# sockperf and memcached's own load generator (memcaslap) against Linux and the engine.
command -v sockperf >/dev/null 2>&1 || apps+=(sockperf)
command -v memcaslap >/dev/null 2>&1 || apps+=(libmemcached-tools)
if [ ${#apps[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  # Debian starts a package's service on install; the harness starts these programs itself,
  # inside lab namespaces. A policy-rc.d that exits 101 forbids the start (invoke-rc.d and
  # deb-systemd-invoke both honour it); one already present (containers ship one) is kept.
  policy=/usr/sbin/policy-rc.d
  ours=0
  if [ ! -e "$policy" ]; then
    printf '#!/bin/sh\n# scripts/setup.sh: no service starts during this install\nexit 101\n' \
      | $SUDO tee "$policy" >/dev/null
    $SUDO chmod 755 "$policy"
    ours=1
    trap '$SUDO rm -f "$policy"' EXIT
  fi
  # iperf3 asks (debconf) whether to start a daemon: answer no.
  echo 'iperf3 iperf3/start_daemon boolean false' | $SUDO debconf-set-selections 2>/dev/null || true
  installed=0
  $SUDO apt-get update && DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y \
    --no-install-recommends "${apps[@]}" && installed=1
  [ "$ours" -eq 0 ] || { $SUDO rm -f "$policy"; trap - EXIT; }
  [ "$installed" -eq 1 ] || { echo "setup.sh: installing ${apps[*]} failed" >&2; exit 1; }
fi
# Whatever the install (or an earlier one) started must not hold the ports the harness uses.
if [ -d /run/systemd/system ]; then
  for s in redis-server memcached nginx iperf3 haproxy; do
    ${SUDO:-} systemctl disable --now "$s" >/dev/null 2>&1 || true
  done
fi
for d in redis-server memcached nginx iperf3 haproxy; do
  for pid in $(pgrep -x "$d" 2>/dev/null || true); do
    # Only daemons in the root network namespace (the lab's own children live in sluice-*).
    [ "$(readlink "/proc/$pid/ns/net" 2>/dev/null)" = "$(readlink /proc/1/ns/net)" ] || continue
    [ "$(id -u)" -eq 0 ] && kill "$pid" 2>/dev/null || true
  done
done
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" || true
done
# Coverage-guided fuzzing (scripts/fuzz.sh): cargo-fuzz drives libFuzzer on the nightly
# toolchain; libfuzzer-sys compiles libFuzzer's C++ (g++ above, with build-essential).
rustup run nightly rustc --version >/dev/null 2>&1 || rustup toolchain install nightly --profile minimal
command -v cargo-fuzz >/dev/null 2>&1 || cargo install cargo-fuzz --locked
