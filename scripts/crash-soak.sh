#!/usr/bin/env bash
# A longer crash run than the test command's: scripts/crash-soak.sh [iterations=60] [seed]
set -euo pipefail
cd "$(dirname "$0")/.."
DATABUILD_CRASH_ITERATIONS=${1:-60} DATABUILD_CRASH_SEED=${2:-$RANDOM} \
  cargo test -p databuild --test integration reliability::builds_killed -- --nocapture
