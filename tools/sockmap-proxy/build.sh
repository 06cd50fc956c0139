#!/bin/sh
# Builds the sockmap proxy into OUTDIR (default: this folder's build/):
#   OUTDIR/sockmap_proxy.bpf.o  the SK_SKB verdict program (clang -target bpf)
#   OUTDIR/sockmap_proxy        the user-space proxy (libbpf)
# Needs clang and libbpf-dev (scripts/setup.sh installs both).
set -eu
src=$(cd "$(dirname "$0")" && pwd)
out=${1:-$src/build}
mkdir -p "$out"
command -v clang >/dev/null 2>&1 || { echo "sockmap proxy: clang not found (apt-get install clang)" >&2; exit 2; }
[ -f /usr/include/bpf/libbpf.h ] || { echo "sockmap proxy: libbpf headers not found (apt-get install libbpf-dev)" >&2; exit 2; }
arch_inc=/usr/include/$(uname -m)-linux-gnu
clang -O2 -g -target bpf -Wall -I"$arch_inc" -c "$src/sockmap_proxy.bpf.c" -o "$out/sockmap_proxy.bpf.o"
cc=${CC:-cc}
command -v "$cc" >/dev/null 2>&1 || cc=clang
"$cc" -O2 -g -Wall -Wextra -o "$out/sockmap_proxy" "$src/sockmap_proxy.c" -lbpf
