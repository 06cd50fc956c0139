#!/usr/bin/env bash
# Builds the Sluice ns-3 module (ns3/) and its scenarios against Debian's libns3-dev, and
# with arguments runs a scenario:
#   scripts/ns3.sh                                  # install what is missing, build
#   scripts/ns3.sh dumbbell --flows 4 --seconds 0.1 # ... and run ns3/scenarios/dumbbell.cc
#   scripts/ns3.sh leaf_spine --quick --stack ns3   # ... the ooo leaf-spine, ns-3's TCP hosts
#   scripts/ns3.sh crosscheck [--quick] [--scale]   # (a) Sluice's simulator, (b) Sluice's core
#                                                   # in ns-3, (c) ns-3's TCP, side by side
# Arguments after the scenario's name are its options (`--name value` or `--name=value`;
# `--help` lists them). SLUICE_FFI_LIB=path/libsluice_ffi.a links that library instead of
# building the release one (the CI test passes the one its own run built);
# SLUICE_NS3_BUILD=dir builds there instead of $CARGO_TARGET_DIR/ns3 (default target/ns3).
set -euo pipefail
cd "$(dirname "$0")/.."
root="$PWD"
target="${CARGO_TARGET_DIR:-$root/target}"
case "$target" in /*) ;; *) target="$root/$target" ;; esac

# ns-3 3.37 from Debian; its pkg-config files name libgsl.so and libsqlite3.so by path and
# libxml2's include dir, so those -dev packages must be there for the flags to resolve.
pkg_ok() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q 'install ok installed'; }
need=()
for p in libns3-dev libgsl-dev libsqlite3-dev libxml2-dev pkg-config make g++; do
  pkg_ok "$p" || need+=("$p")
done
if [ ${#need[@]} -gt 0 ]; then
  SUDO=""; [ "$(id -u)" -eq 0 ] || SUDO="sudo"
  echo "ns3.sh: installing ${need[*]}" >&2
  $SUDO apt-get update
  DEBIAN_FRONTEND=noninteractive $SUDO apt-get install -y --no-install-recommends "${need[@]}"
fi

lib="${SLUICE_FFI_LIB:-}"
if [ -z "$lib" ]; then
  cargo build --release --locked -p sluice-ffi >&2
  lib="$target/release/libsluice_ffi.a"
fi
build="${SLUICE_NS3_BUILD:-$target/ns3}"
make -s -C ns3 -j"$(nproc)" BUILD="$build" SLUICE_FFI_LIB="$(realpath "$lib")" >&2

[ $# -gt 0 ] || { echo "ns3.sh: built $build/ (scenarios: dumbbell leaf_spine)" >&2; exit 0; }
scenario="$1"
shift
if [ "$scenario" = crosscheck ]; then
  exec "$root/scripts/ns3-crosscheck.sh" "$build" "$@"
fi
[ -x "$build/$scenario" ] || { echo "ns3.sh: no scenario '$scenario' (dumbbell leaf_spine crosscheck)" >&2; exit 2; }
# ns-3's CommandLine takes --name=value only; accept the usual --name value too.
args=()
while [ $# -gt 0 ]; do
  case "$1" in
    --*=*|--help|--PrintHelp) args+=("$1") ;;
    --*) if [ $# -gt 1 ] && [[ "$2" != --* ]]; then args+=("$1=$2"); shift; else args+=("$1"); fi ;;
    *) args+=("$1") ;;
  esac
  shift
done
exec "$build/$scenario" "${args[@]}"
