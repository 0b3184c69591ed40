#!/usr/bin/env bash
# What a job's start costs the thread that starts it: glibc's posix_spawn against the clone on a
# kept stack of crates/exec/src/spawn.rs, alone and beside a busy thread (bench/spawn/spawn.c).
#   bench/spawn.sh [rounds=3] [starts=3000]
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-3}
starts=${2:-3000}
bin=$(mktemp)
trap 'rm -f "$bin"' EXIT
cc -O2 -o "$bin" spawn/spawn.c -lpthread
for _ in $(seq "$rounds"); do
  for busy in 0 1; do
    for mode in 0 1; do
      "$bin" "$mode" "$starts" "$busy"
    done
  done
done
