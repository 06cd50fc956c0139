#!/usr/bin/env bash
# Sets up, builds `sluice` and libsluice_preload.so, and runs the main demo: `sluice demo`
# (no root needed).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
# The README's other commands run this `sluice` binary, and `sluice run` the preload library
# that it finds beside it (target/release/, or $CARGO_TARGET_DIR/release/): build both.
cargo build --release --locked -p sluice-cli -p sluice-preload
cargo run --release --locked -p sluice-cli -- demo "$@"
