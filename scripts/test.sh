#!/usr/bin/env bash
# The whole test suite: formatting, lints, unit/simulator/property tests, and a short fuzz run.
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
export CARGO_TERM_COLOR=never
cargo fmt --all -- --check
cargo clippy --workspace --all-targets --locked -- -D warnings
cargo test --workspace --locked
# The fuzz harness for a short budget (run longer by hand: --seconds 600).
cargo run --release --locked -p sluice-fuzz -- --seconds "${FUZZ_SECONDS:-30}"
