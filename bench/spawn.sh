#!/usr/bin/env bash
# What a job's start costs the thread that starts it: glibc's posix_spawn against the clone on a
# kept stack of crates/exec/src/spawn.rs, alone and beside a busy thread (bench/spawn/spawn.c).
# Recorded: spawn.idle and spawn.busy, the clone's median against posix_spawn's.
#   bench/spawn.sh [rounds=3] [starts=3000]
set -euo pipefail
cd "$(dirname "$0")"
rounds=${1:-3}
starts=${2:-3000}
bin=$(mktemp)
trap 'rm -f "$bin" "$bin.out"' EXIT
cc -O2 -o "$bin" spawn/spawn.c -lpthread
for _ in $(seq "$rounds"); do
  for busy in 0 1; do
    for mode in 0 1; do
      "$bin" "$mode" "$starts" "$busy" | tee -a "$bin.out"
    done
  done
done
python3 - "$bin.out" "bench/spawn.sh $*" "$rounds" <<'PY'
import re, statistics, sys
from record import record
runs = [re.match(r"(.*?)\s{2,}(.*?)\s{2,}\s*([0-9.]+) us of the starting thread", line).groups() for line in open(sys.argv[1])]
def median(mode, busy):
    return statistics.median(float(us) for m, b, us in runs if m == mode and b == busy)
for name, busy in (("idle", "no other thread"), ("busy", "thread busy")):
    clone, spawn = median("clone, stack kept", busy), median("posix_spawn", busy)
    record(f"spawn.{name}", round(clone, 1), "µs", None,
           f"a job's start, the starting thread's CPU (clone on a kept stack), {busy.replace('thread busy', 'another thread busy')}",
           peer=f"`posix_spawn` {spawn:.1f} µs", detail=f"median of {sys.argv[3]} round{'s' if sys.argv[3] != '1' else ''}",
           command=sys.argv[2].strip())
PY
