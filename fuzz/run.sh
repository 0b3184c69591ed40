#!/usr/bin/env bash
# Runs every fuzz target for a fixed time (default 60 s each): fuzz/run.sh [seconds]
# cargo-fuzz needs nightly flags; RUSTC_BOOTSTRAP lets the machine's stable toolchain accept them.
set -euo pipefail
cd "$(dirname "$0")"
command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
export RUSTC_BOOTSTRAP=1
for target in refs_and_patterns graph_file braces_and_configs; do
  echo "== $target"
  cargo fuzz run "$target" -- -max_total_time="${1:-60}" -max_len=4096
done
