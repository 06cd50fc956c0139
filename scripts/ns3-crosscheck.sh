#!/usr/bin/env bash
# The ns-3 cross-check (issue 22), run by `scripts/ns3.sh crosscheck [--quick] [--scale]`
# after it built the scenarios into $1: the dumbbell and the leaf-spine with
#   (a) Sluice's core in Sluice's simulator (crates/experiments' ns3_crosscheck example),
#   (b) Sluice's core in ns-3 (--stack sluice), (c) ns-3's own TCP (--stack ns3),
# flow-completion-time p50/p99 and throughput side by side with ratios to (a). --scale adds
# the cost of (b) and (c) (wall clock, peak memory, events/s) for 48, 144 and 576 hosts.
# Simulated-time results; the wall-clock figures depend on the machine's load.
# Settings matched to ns-3's TCP (docs/notes/issue-22/crosscheck.md "Findings"): Sluice's
# hosts run without Nagle in (a) and (b), as ns-3's TCP (TcpNoDelay, which cannot be turned
# off reliably in ns-3 3.37), and their receivers keep 64 out-of-order intervals in both
# topologies, since ns-3's TCP receiver keeps every out-of-order segment.
set -euo pipefail
build="$1"
shift
quick=0
scale=0
for a in "$@"; do
  case "$a" in
    --quick) quick=1 ;;
    --scale) scale=1 ;;
    *) echo "ns3.sh crosscheck: unknown option '$a' (--quick, --scale)" >&2; exit 2 ;;
  esac
done
cd "$(dirname "$0")/.."
target="${CARGO_TARGET_DIR:-$PWD/target}"
cargo build --release --locked -p sluice-experiments --example ns3_crosscheck >&2
sim="$target/release/examples/ns3_crosscheck"
# CROSSCHECK_OUT=dir keeps every run's log and CSV there (else a temporary directory).
if [ -n "${CROSSCHECK_OUT:-}" ]; then
  out="$CROSSCHECK_OUT"
  mkdir -p "$out"
else
  out="$(mktemp -d)"
  trap 'rm -rf "$out"' EXIT
fi

# The matched settings, explicit on every Sluice run: (a) the example's flags, (b) the ns-3
# scenarios' --ooo and SluiceStack's Nagle attribute.
ooo=64
matched_a=(--nagle false --ooo "$ooo")
matched_b=(--ns3::SluiceStack::Nagle=false --ooo="$ooo")
# The leaf-spine's senders keep as many SACKed ranges as its receivers keep intervals: with
# the core's 8, ranges the scoreboard forgot are repaired one per round trip (RFC 6582) and
# NewReno's p99 rose from 13.6 to 17.2 ms in (a) (docs/notes/issue-22/tail.md).
ls_a=(--scoreboard "$ooo")
ls_b=(--ns3::SluiceStack::SackScoreboard="$ooo")

# col FILE NAME: the value of column NAME in the CSV's second line.
col() {
  awk -F, -v name="$2" 'NR == 1 { for (i = 1; i <= NF; i++) if ($i == name) c = i }
                        NR == 2 { print (c ? $c : "nan") }' "$1"
}
# ratio X Y: X / Y with two decimals ("-" when not a number).
ratio() { awk -v x="$1" -v y="$2" 'BEGIN { if (y + 0 > 0 && x + 0 >= 0 && x != "nan") printf "%.2f", x / y; else printf "-" }'; }
row() { # row SCENARIO IMPL CSV REF_CSV
  local p50 p99 g r50 r99 rg
  p50=$(col "$3" "fct p50 ms"); p99=$(col "$3" "fct p99 ms"); g=$(col "$3" "Gbit/s")
  r50=$(col "$4" "fct p50 ms"); r99=$(col "$4" "fct p99 ms"); rg=$(col "$4" "Gbit/s")
  printf "%-46s %-26s %10.4f %5s %10.4f %5s %8.3f %5s\n" "$1" "$2" "$p50" "$(ratio "$p50" "$r50")" \
    "$p99" "$(ratio "$p99" "$r99")" "$g" "$(ratio "$g" "$rg")"
}
run() { # run NAME CSV COMMAND...: runs a case, its output kept for a failure
  local name="$1" csv="$2"
  shift 2
  echo "crosscheck: $name" >&2
  if ! "$@" >"$out/$name.log" 2>&1 || [ ! -s "$csv" ]; then
    echo "crosscheck: $name failed:" >&2
    tail -5 "$out/$name.log" >&2
    return 1
  fi
}

printf "%-46s %-26s %10s %5s %10s %5s %8s %5s\n" scenario implementation "fct p50 ms" x "fct p99 ms" x "Gbit/s" x
status=0
dumbbells=("4 1000 1000000")
[ "$quick" = 1 ] || dumbbells+=("8 100 1000000")
for d in "${dumbbells[@]}"; do
  read -r flows mbps bytes <<<"$d"
  for cc in dctcp newreno; do
    name="dumbbell-$flows-$mbps-$cc"
    label="dumbbell ${flows}x1MB ${mbps}Mbit/s $cc"
    run "$name-a" "$out/$name-a.csv" "$sim" dumbbell --flows "$flows" --mbps "$mbps" --bytes "$bytes" --cc "$cc" \
      "${matched_a[@]}" --csv "$out/$name-a.csv" || status=1
    for stack in sluice ns3; do
      extra=(); [ "$stack" = sluice ] && extra=("${matched_b[@]}")
      run "$name-$stack" "$out/$name-$stack.csv" "$build/dumbbell" --stack="$stack" --flows="$flows" \
        --bandwidth="${mbps}Mbps" --bytes="$bytes" --cc="$cc" --seconds=2 "${extra[@]}" \
        --csv="$out/$name-$stack.csv" || status=1
    done
    [ -s "$out/$name-a.csv" ] || continue
    row "$label" "(a) sluice in sluice sim" "$out/$name-a.csv" "$out/$name-a.csv"
    [ -s "$out/$name-sluice.csv" ] && row "" "(b) sluice in ns-3" "$out/$name-sluice.csv" "$out/$name-a.csv"
    [ -s "$out/$name-ns3.csv" ] && row "" "(c) ns-3 TCP in ns-3" "$out/$name-ns3.csv" "$out/$name-a.csv"
  done
done

if [ "$quick" = 1 ]; then ls=(--quick); lsa=(--quick); ms=5; label="leaf-spine 2x2x4 (ooo --quick)"
else ls=(); lsa=(); ms=10; label="leaf-spine 4x6x8 (ooo)"; fi
for cc in dctcp newreno; do
  name="leafspine-$cc"
  # (a) draws the workload; (b) and (c) replay the very channels and arrivals it ran.
  run "$name-a" "$out/$name-a.csv" "$sim" leaf-spine "${lsa[@]}" --ms "$ms" --cc "$cc" "${matched_a[@]}" \
    "${ls_a[@]}" --workload "$out/$name.workload" --csv "$out/$name-a.csv" || status=1
  for stack in sluice ns3; do
    extra=(); [ "$stack" = sluice ] && extra=("${matched_b[@]}" "${ls_b[@]}")
    run "$name-$stack" "$out/$name-$stack.csv" "$build/leaf_spine" "${ls[@]/%/=1}" --stack="$stack" --ms="$ms" \
      --cc="$cc" "${extra[@]}" --workload="$out/$name.workload" --csv="$out/$name-$stack.csv" || status=1
  done
  [ -s "$out/$name-a.csv" ] || continue
  row "$label, ${ms} ms, $cc" "(a) sluice in sluice sim" "$out/$name-a.csv" "$out/$name-a.csv"
  [ -s "$out/$name-sluice.csv" ] && row "" "(b) sluice in ns-3" "$out/$name-sluice.csv" "$out/$name-a.csv"
  [ -s "$out/$name-ns3.csv" ] && row "" "(c) ns-3 TCP in ns-3" "$out/$name-ns3.csv" "$out/$name-a.csv"
done
echo "x: ratio to (a). Simulated time; the leaf-spine's (b) and (c) replay (a)'s channels and arrivals."
echo "matched to ns-3's TCP (no Nagle, TcpNoDelay; receiver keeps every out-of-order segment):"
echo "  (a) ${matched_a[*]}   (b) ${matched_b[*]}   (c) ns-3 defaults via ConfigureNs3Tcp"
echo "  leaf-spine also: (a) ${ls_a[*]}   (b) ${ls_b[*]} (a SACKed range per receiver interval)"

if [ "$scale" = 1 ]; then
  echo
  printf "%-6s %-10s %10s %10s %12s %12s %12s %10s\n" hosts stack "sim ms" "wall s" "maxrss MB" events "events/s" messages
  # hosts leaves: 48 = 6 x 8 (ooo's), 144 = 12 x 12, 576 = 24 x 24; 4 spines; 1 ms of arrivals.
  for hl in "48 6" "144 12" "576 24"; do
    read -r hosts leaves <<<"$hl"
    for stack in sluice ns3; do
      name="scale-$hosts-$stack"
      if run "$name" "$out/$name.csv" "$build/leaf_spine" --stack="$stack" --hosts="$hosts" --leaves="$leaves" \
        --ms=1 --csv="$out/$name.csv"; then
        sim_ms=$(grep -o '[0-9.]* s simulated' "$out/$name.log" | awk '{ printf "%.1f", $1 * 1000 }')
        printf "%-6s %-10s %10s %10.2f %12.1f %12s %12.0f %10s\n" "$hosts" "$stack" "$sim_ms" \
          "$(col "$out/$name.csv" "wall s")" "$(col "$out/$name.csv" "maxrss MB")" \
          "$(col "$out/$name.csv" events)" "$(col "$out/$name.csv" events/s)" "$(col "$out/$name.csv" flows)"
      else
        status=1
      fi
    done
  done
  echo "wall clock on a shared machine: noisy; events/s beside it. Simulated time includes the channels' setup."
fi
exit "$status"
