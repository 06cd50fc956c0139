#!/usr/bin/env bash
# Sets up and runs the main demo: `sluice demo` (no root needed).
set -euo pipefail
cd "$(dirname "$0")/.."
./scripts/setup.sh
cargo run --release --locked -p sluice-cli -- demo "$@"
