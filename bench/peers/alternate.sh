#!/usr/bin/env bash
# Alternates `make -j2` and `databuild build --parallel 2` on the ~2.7k-job peer workload, one of
# each per round, and prints each round's times and ratio, then the medians. Alternating keeps the
# machine's drift (±15% over minutes here) out of the comparison.
#
#   bench/peers/alternate.sh [ROUNDS] [DATABUILD_BINARY...]
#
# PEER_SIZE=DATESxCATEGORIES picks the workload (default 120x10, ~2.7k jobs; 1095x10 is run.sh's
# ~24k).
#
# With several binaries (say, two commits' builds), each runs once per round after make, in an
# order that rotates from round to round; use an even number of rounds.
set -euo pipefail
cd "$(dirname "$0")/../.."
rounds=${1:-10}
shift || true
if [ $# -eq 0 ]; then
  cargo build --release -q -p databuild
  set -- "$PWD/target/release/databuild"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
size=${PEER_SIZE:-120x10}
python3 bench/peers/generate.py "$work" "${size%x*}" "${size#*x}" >/dev/null
cd "$work"
# Each command starts with the previous one's files on disk: its write-back would otherwise land
# on whichever command runs next (the second in a round came out ahead by ~10% without this).
seconds() { local s; sync; sleep 0.5; s=$(date +%s.%N); "$@" >/dev/null 2>&1; echo "$(date +%s.%N) - $s" | bc; }
clean() { rm -rf data/reviews data/categorized data/summary data/weekly .databuild; }
binaries=("$@")
for round in $(seq "$rounds"); do
  clean
  m=$(seconds make -s -j2)
  line=$(printf 'make %.2f s' "$m")
  # The binaries' order rotates each round: the position in a round still matters by ~10%
  # here (the first after make does worse), so each binary takes each position in turn.
  n=${#binaries[@]}
  for i in $(seq 0 $((n - 1))); do
    b=${binaries[$(((i + round) % n))]}
    clean
    t=$(seconds "$b" build --parallel 2 $(cat targets.txt))
    line="$line | $(basename "$b") $(printf '%.2f s (%.2f×)' "$t" "$(echo "$t / $m" | bc -l)")"
    echo "$b $t $m" >> times
  done
  echo "$line"
done
python3 - <<'PY'
import statistics
rows = [l.split() for l in open("times")]
for b in dict.fromkeys(r[0] for r in rows):
    t = [float(r[1]) for r in rows if r[0] == b]
    m = [float(r[2]) for r in rows if r[0] == b]
    ratios = sorted(x / y for x, y in zip(t, m))
    print(f"{b}: median {statistics.median(t):.2f} s vs make {statistics.median(m):.2f} s = "
          f"{statistics.median(t) / statistics.median(m):.2f}×; per-round ratios "
          f"{ratios[0]:.2f}–{ratios[-1]:.2f}× (median {statistics.median(ratios):.2f}×)")
PY
