#!/usr/bin/env bash
# Installs what the build needs on a fresh Debian machine (Rust is assumed present).
set -euo pipefail
need=()
command -v cc >/dev/null 2>&1 || need+=(build-essential)
command -v pkg-config >/dev/null 2>&1 || need+=(pkg-config)
# The namespace lab (crates/lab) drives ip, sysctl and ethtool; its tests ping across it.
command -v ip >/dev/null 2>&1 || [ -x /usr/sbin/ip ] || [ -x /sbin/ip ] || need+=(iproute2)
command -v sysctl >/dev/null 2>&1 || [ -x /usr/sbin/sysctl ] || [ -x /sbin/sysctl ] || need+=(procps)
command -v ethtool >/dev/null 2>&1 || [ -x /usr/sbin/ethtool ] || [ -x /sbin/ethtool ] || need+=(ethtool)
command -v ping >/dev/null 2>&1 || need+=(iputils-ping)
# Linux peers in the lab's interop tests are small Python socket programs.
command -v python3 >/dev/null 2>&1 || need+=(python3)
# The AF_XDP backend (xsk-rs) builds libxdp and libbpf from source: clang compiles libxdp's
# BPF programs and bindgen loads libclang, llc and m4 are libxdp's build tools; libbpf-dev
# is what libxdp's configure finds (without it, it demands libpcap); libelf and zlib link in.
command -v clang >/dev/null 2>&1 || need+=(clang)
command -v llc >/dev/null 2>&1 || need+=(llvm)
command -v m4 >/dev/null 2>&1 || need+=(m4)
pkg_ok() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
for p in libbpf-dev libelf-dev zlib1g-dev; do pkg_ok "$p" || need+=("$p"); done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi
for c in rustfmt clippy; do
  rustup component list --installed 2>/dev/null | grep -q "^$c" || rustup component add "$c" || true
done
