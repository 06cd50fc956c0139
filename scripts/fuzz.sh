#!/usr/bin/env bash
# Coverage-guided fuzzing (cargo-fuzz, libFuzzer, nightly): builds the targets in fuzz/ and runs
# each in turn for its budget, then prints a table (executions, corpus, coverage, crashes).
#
#   scripts/fuzz.sh [--minutes N | --seconds N] [TARGET...]    # default: 1 minute, every target
#
# Targets are what `cargo fuzz list` finds (a file in fuzz/fuzz_targets/ with its [[bin]] in
# fuzz/Cargo.toml). A target file may carry libFuzzer flags on a line `//! libfuzzer: FLAGS`
# (its dictionary, a -max_len). Each run starts from the checked-in seeds (fuzz/corpus/TARGET,
# read only) and grows fuzz/work/corpus/TARGET, kept between runs, so a long campaign goes on
# where the last one stopped. Exits non-zero if a target crashed, printing how to reproduce it.
# FUZZ_SANITIZER=address builds with AddressSanitizer; the default is none, since the parsers
# and the core forbid unsafe code and ASan would only slow them.
set -euo pipefail
cd "$(dirname "$0")/.."

seconds=60
targets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --minutes) seconds=$(($2 * 60)); shift 2 ;;
    --seconds) seconds=$2; shift 2 ;;
    -h|--help) sed -n '2,13p' "$0"; exit 0 ;;
    -*) echo "fuzz.sh: unknown option $1" >&2; exit 2 ;;
    *) targets+=("$1"); shift ;;
  esac
done
[[ "$seconds" =~ ^[0-9]+$ ]] && [ "$seconds" -gt 0 ] || { echo "fuzz.sh: bad budget $seconds" >&2; exit 2; }

# Missing tools are an error, never a skip: scripts/setup.sh installs them.
if ! rustup run nightly rustc --version >/dev/null 2>&1; then
  echo "error: fuzz.sh needs the nightly toolchain (rustup toolchain install nightly)" >&2
  exit 1
fi
if ! cargo +nightly fuzz --version >/dev/null 2>&1; then
  echo "error: fuzz.sh needs cargo-fuzz (scripts/setup.sh installs it: cargo install cargo-fuzz --locked)" >&2
  exit 1
fi

sanitizer=${FUZZ_SANITIZER:-none}
fuzz() { cargo +nightly fuzz "$@"; }
mapfile -t all < <(fuzz list)
[ ${#all[@]} -gt 0 ] || { echo "error: cargo fuzz list found no target" >&2; exit 1; }
if [ ${#targets[@]} -eq 0 ]; then
  targets=("${all[@]}")
else
  for t in "${targets[@]}"; do
    printf '%s\n' "${all[@]}" | grep -qx "$t" || { echo "error: no fuzz target $t (have: ${all[*]})" >&2; exit 2; }
  done
fi

# Release with debug assertions and overflow checks (cargo-fuzz's default): an overflow is a
# finding, not a silent wrap.
echo "fuzz.sh: building ${#targets[@]} target(s) (sanitizer: $sanitizer)"
if [ ${#targets[@]} -eq ${#all[@]} ]; then
  fuzz build -s "$sanitizer"
else
  for t in "${targets[@]}"; do fuzz build -s "$sanitizer" "$t"; done
fi

mkdir -p fuzz/work/logs
rows=()
crashes=0
repro=()
for t in "${targets[@]}"; do
  work=fuzz/work/corpus/$t
  seeds=fuzz/corpus/$t
  mkdir -p "$work" "$seeds"
  # shellcheck disable=SC2207 # the flags are words
  flags=($(sed -n 's|^//! libfuzzer: ||p' "fuzz/fuzz_targets/$t.rs"))
  log=fuzz/work/logs/$t.log
  echo "fuzz.sh: $t for ${seconds}s ${flags[*]:-}"
  rc=0
  # New inputs go to the first corpus folder only; the checked-in seeds stay as they are.
  fuzz run -s "$sanitizer" "$t" "$work" "$seeds" -- \
    -max_total_time="$seconds" -timeout=25 -print_final_stats=1 "${flags[@]}" \
    >"$log" 2>&1 || rc=$?
  last=$(grep -E '^#[0-9]+.*cov: ' "$log" | tail -n 1 || true)
  execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log" | tail -n 1)
  [ -n "$execs" ] || execs=$(sed -nE 's/^#([0-9]+).*/\1/p' <<<"$last")
  cov=$(sed -nE 's/.* cov: ([0-9]+).*/\1/p' <<<"$last")
  ft=$(sed -nE 's/.* ft: ([0-9]+).*/\1/p' <<<"$last")
  corp=$(sed -nE 's/.* corp: ([0-9]+\/[0-9]+[a-zA-Z]+).*/\1/p' <<<"$last")
  artifact=$(sed -nE 's/.*Test unit written to ([^ ]+).*/\1/p' "$log" | tail -n 1)
  crashed=0
  if [ "$rc" -ne 0 ] || [ -n "$artifact" ]; then
    crashed=1
    crashes=$((crashes + 1))
    echo "fuzz.sh: $t FAILED (exit $rc); the end of $log:" >&2
    grep -vE '^#[0-9]+' "$log" | tail -n 30 >&2
    if [ -n "$artifact" ]; then
      repro+=("cargo +nightly fuzz run -s $sanitizer $t $artifact")
    else
      repro+=("$t failed without a test unit: see $log")
    fi
  fi
  rows+=("$(printf '%-22s %14s %12s %8s %9s %8s' "$t" "${execs:-?}" "${corp:-?}" "${cov:-?}" "${ft:-?}" "$crashed")")
done

echo
echo "coverage-guided fuzzing: ${seconds}s per target, sanitizer $sanitizer"
printf '%-22s %14s %12s %8s %9s %8s\n' target executions corpus cov features crashes
printf '%s\n' "${rows[@]}"
if [ "$crashes" -gt 0 ]; then
  echo
  echo "$crashes target(s) crashed. Reproduce (the panic and its input):"
  printf '  %s\n' "${repro[@]}"
  echo "then copy the input into fuzz/corpus/TARGET/ (the stable test replays it) and fix."
  exit 1
fi
