#!/usr/bin/env bash
# Sanitizers on nightly over the code that uses `unsafe`: AddressSanitizer over the tests of
# the crates that touch the OS, Miri over sluice-shm's pure parts, and a short AddressSanitizer
# run of every coverage-guided fuzz target. Prints a table (step, tests or executions, result)
# and exits non-zero on any sanitizer report, failed test or crash.
#
#   scripts/sanitize.sh [--fuzz-seconds N] [--no-asan] [--no-miri] [--no-fuzz] [CRATE...]
#
# CRATE: packages for the ASan step (default: sluice-device sluice-shm sluice sluice-preload
# sluice-ffi).
# ASan rebuilds std instrumented (-Zbuild-std, needs `rustup +nightly component add
# rust-src`) into target-asan/, so the normal target/ is not invalidated; the first run
# builds for a while, later ones are incremental. Tests that need root and the namespace lab
# stay ignored, as in a plain `cargo test`. The preload library and libsluice.so are loaded
# by programs built without ASan, so a shared ASan runtime is made from rustc's and loaded
# first (SLUICE_TEST_PRELOAD_FIRST for the preload tests, a `cc` wrapper for the C tests).
# Miri runs with isolation (tests that map a memfd or read files are
# `#[cfg_attr(miri, ignore)]`) and PROPTEST_CASES=16 (Miri interprets every step). Logs go
# to target-asan/logs/. Not in CI: a cold run takes many minutes (a warm one about 3.5).
set -euo pipefail
cd "$(dirname "$0")/.."

fuzz_seconds=10
asan=1 miri=1 fuzz=1
crates=()
while [ $# -gt 0 ]; do
  case "$1" in
    --fuzz-seconds) fuzz_seconds=$2; shift 2 ;;
    --no-asan) asan=0; shift ;;
    --no-miri) miri=0; shift ;;
    --no-fuzz) fuzz=0; shift ;;
    -h|--help) sed -n '2,18p' "$0"; exit 0 ;;
    -*) echo "sanitize.sh: unknown option $1" >&2; exit 2 ;;
    *) crates+=("$1"); shift ;;
  esac
done
[ ${#crates[@]} -gt 0 ] || crates=(sluice-device sluice-shm sluice sluice-preload sluice-ffi)

if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "error: sanitize.sh needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 1
fi
for c in rust-src miri; do
  if ! rustup +nightly component list --installed 2>/dev/null | grep -q "^$c"; then
    echo "error: sanitize.sh needs nightly's $c (rustup +nightly component add $c)" >&2
    exit 1
  fi
done

host=$(rustc +nightly -vV | sed -n 's/^host: //p')
logs=target-asan/logs
mkdir -p "$logs"
rows=()
bad=0

# Sums the passed/failed/ignored counts of every "test result:" line in a log.
counts() {
  awk '/^test result:/ { for (i = 1; i <= NF; i++) {
         if ($(i+1) ~ /^passed/) p += $i; if ($(i+1) ~ /^failed/) f += $i
         if ($(i+1) ~ /^ignored/) g += $i } }
       END { printf "%d passed, %d failed, %d ignored", p, f, g }' "$1"
}

# rustc links its ASan runtime statically, into executables only, so an instrumented cdylib
# (libsluice.so, libsluice_preload.so) loaded by a program built without ASan (the C tests,
# python under the preload) needs the runtime as a shared library, loaded first: made here
# from rustc's own static runtime (the same LLVM as the instrumentation), without its
# preinit object, which a shared library may not carry.
make_runtime() {
  local dir=target-asan/asan-rt static
  static=$(rustc +nightly --print sysroot)/lib/rustlib/$host/lib/librustc-nightly_rt.asan.a
  [ -f "$static" ] || { echo "error: no $static" >&2; exit 1; }
  rm -rf "$dir/objects" && mkdir -p "$dir/objects"
  (cd "$dir/objects" && ar x "$static" && rm -f asan_preinit.cpp.o)
  cc -shared -o "$dir/libasan-rustc.so" "$dir"/objects/*.o -lpthread -ldl -lm -lrt -lstdc++
  # C programs linked against an instrumented libsluice.so get the runtime first in their
  # needed list (compiling alone passes through).
  cat >"$dir/cc" <<CC
#!/bin/sh
for a in "\$@"; do case "\$a" in -c|-S|-E) exec cc "\$@" ;; esac; done
exec cc -Wl,--no-as-needed "$PWD/$dir/libasan-rustc.so" -Wl,--as-needed -Wl,-rpath,"$PWD/$dir" "\$@"
CC
  chmod +x "$dir/cc"
  asan_runtime=$PWD/$dir/libasan-rustc.so
  asan_cc=$PWD/$dir/cc
}

t0=$SECONDS
if [ "$asan" = 1 ]; then
  make_runtime
  for c in "${crates[@]}"; do
    log=$logs/asan-$c.log
    echo "sanitize.sh: AddressSanitizer over $c's tests ($log)"
    rc=0
    asan_env=(CARGO_TARGET_DIR=target-asan RUSTFLAGS="-Zsanitizer=address"
      RUSTDOCFLAGS="-Zsanitizer=address" ASAN_OPTIONS="detect_leaks=1"
      SLUICE_TEST_PRELOAD_FIRST="$asan_runtime" CC="$asan_cc")
    # The examples some tests start are built first, instrumented, where the tests look.
    env "${asan_env[@]}" cargo +nightly build -Zbuild-std --target "$host" -p "$c" --examples \
      >"$log" 2>&1 || rc=$?
    [ "$rc" -ne 0 ] || env "${asan_env[@]}" cargo +nightly test -Zbuild-std --target "$host" \
      -p "$c" --lib --tests --no-fail-fast >>"$log" 2>&1 || rc=$?
    reports=$(grep -cE '^==[0-9]+==ERROR: (AddressSanitizer|LeakSanitizer)' "$log" || true)
    result="ok"
    if [ "$reports" -gt 0 ]; then
      result="$reports sanitizer report(s)"
      bad=1
    elif [ "$rc" -ne 0 ]; then
      result="failed (exit $rc)"
      bad=1
    fi
    rows+=("$(printf '%-14s %-16s %-40s %s' asan "$c" "$(counts "$log")" "$result")")
    [ "$result" = ok ] || grep -E -B2 -A25 '^==[0-9]+==ERROR|panicked|^error' "$log" | head -60 >&2 || true
  done
fi

if [ "$miri" = 1 ]; then
  log=$logs/miri-sluice-shm.log
  echo "sanitize.sh: Miri over sluice-shm ($log)"
  rc=0
  # Proptest asks for the working directory (its failure files); isolation answers an error.
  CARGO_TARGET_DIR=target-asan PROPTEST_CASES=${MIRI_PROPTEST_CASES:-16} \
    MIRIFLAGS="-Zmiri-env-forward=PROPTEST_CASES -Zmiri-isolation-error=warn-nobacktrace" \
    cargo +nightly miri test -p sluice-shm >"$log" 2>&1 || rc=$?
  result=ok
  if grep -qE 'Undefined Behavior|unsupported operation' "$log"; then
    result="Miri error"
    bad=1
  elif [ "$rc" -ne 0 ]; then
    result="failed (exit $rc)"
    bad=1
  fi
  rows+=("$(printf '%-14s %-16s %-40s %s' miri sluice-shm "$(counts "$log")" "$result")")
  [ "$result" = ok ] || grep -E -A20 '^error|panicked' "$log" | head -40 >&2 || true
fi

if [ "$fuzz" = 1 ]; then
  log=$logs/asan-fuzz.log
  echo "sanitize.sh: every fuzz target under AddressSanitizer for ${fuzz_seconds}s ($log)"
  rc=0
  # Built in target-asan/ too: the uninstrumented fuzz build (CI's) stays as it is.
  CARGO_TARGET_DIR=$PWD/target-asan FUZZ_SANITIZER=address \
    scripts/fuzz.sh --seconds "$fuzz_seconds" >"$log" 2>&1 || rc=$?
  [ "$rc" -eq 0 ] || bad=1
  targets=$(sed -n '/^target  *executions/,$p' "$log" | grep -cvE '^target|^$|crashed|Reproduce|^  |then copy' || true)
  rows+=("$(printf '%-14s %-16s %-40s %s' asan-fuzz "$targets targets" "see the table below" "$([ "$rc" -eq 0 ] && echo ok || echo "crash (exit $rc)")")")
fi

echo
echo "sanitizers: $((SECONDS - t0)) s"
printf '%-14s %-16s %-40s %s\n' run crate tests result
printf '%s\n' "${rows[@]}"
if [ "$fuzz" = 1 ]; then
  echo
  sed -n '/^coverage-guided fuzzing:/,$p' "$logs/asan-fuzz.log"
fi
exit "$bad"
