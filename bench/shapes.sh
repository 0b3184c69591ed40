#!/usr/bin/env bash
# DataBuild beside `make -j2` on several workload shapes (bench/shapes/generate.py): a build from
# scratch and the no-op rerun, alternating make and DataBuild in each round so the machine's drift
# stays out of the ratios. Reports medians of wall time, DataBuild's own CPU per job (its CPU,
# jobs included, minus make's over the same jobs) and peak RSS.
#   bench/shapes.sh [rounds=3] [jobs=2700] [shapes="dates categories deep fanin"]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-3}
jobs=${2:-2700}
shapes=${3:-dates categories deep fanin}
cargo build --release -q -p databuild
db="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
# measure SHAPE SYSTEM SCENARIO CMD...: a line of wall s (to the ns; `time`'s is to 10 ms), cpu s
# (user+sys, children included: 10 ms steps), peak KB.
measure() {
  local shape=$1 system=$2 scenario=$3; shift 3
  sync; sleep 0.5
  local start end
  start=$(date +%s%N)
  /usr/bin/time -f "%U %S %M" -o "$work/t" "$@" >/dev/null 2>&1 || { echo "$shape $system $scenario failed" >&2; exit 1; }
  end=$(date +%s%N)
  read -r user sys rss < "$work/t"
  echo "$shape $system $scenario $(echo "($end - $start) / 10^9" | bc -l) $(echo "$user + $sys" | bc) $rss" >> "$work/results"
}
# fresh SHAPE SYSTEM ROUND: a copy of the workload of its own to build in. Nothing is deleted
# while the benchmark measures: on ext4 without a journal (this project's VMs), creating a file
# skips every inode freed in the last minute (`recently_deleted`, a scan of the inode table), so
# removing one build's thousands of outputs before the next made that next build pay for them.
fresh() {
  local dir="$work/runs/$1-$2-$3"
  mkdir -p "$work/runs"
  cp -r "$work/$1" "$dir"
  cd "$dir"
}
for shape in $shapes; do
  python3 bench/shapes/generate.py "$work/$shape" "$shape" "$jobs" >/dev/null
  n=$(cd "$work/$shape" && make -n -j2 | grep -c 'job.sh')
  echo "$shape $n" >> "$work/jobs"
  for round in $(seq "$rounds"); do
    fresh "$shape" make "$round"
    measure "$shape" make build make -s -j2
    measure "$shape" make noop make -s -j2
    fresh "$shape" databuild "$round"
    measure "$shape" databuild build "$db" build --parallel 2 $(cat targets.txt)
    measure "$shape" databuild noop "$db" build --parallel 2 $(cat targets.txt)
  done
  cd "$root"
done
python3 - "$work/results" "$work/jobs" <<'PY'
import statistics, sys
rows = [l.split() for l in open(sys.argv[1])]
jobs = dict(l.split() for l in open(sys.argv[2]))
def med(shape, system, scenario, col):
    return statistics.median(float(r[col]) for r in rows if r[:3] == [shape, system, scenario])
print("| shape | jobs | make build | databuild build | ratio | make no-op | databuild no-op | ratio | own CPU per job (build) | peak RSS build / no-op |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
for shape in jobs:
    n = int(jobs[shape])
    mb, db = med(shape, "make", "build", 3), med(shape, "databuild", "build", 3)
    mn, dn = med(shape, "make", "noop", 3), med(shape, "databuild", "noop", 3)
    cpu = (med(shape, "databuild", "build", 4) - med(shape, "make", "build", 4)) / n * 1e3
    rb, rn = med(shape, "databuild", "build", 5) / 1024, med(shape, "databuild", "noop", 5) / 1024
    print(f"| {shape} | {n:,} | {mb:.2f} s | {db:.2f} s | {db / mb:.2f}× | {mn:.3f} s | {dn:.3f} s | {dn / mn:.2f}× | {cpu:.2f} ms | {rb:.0f} / {rn:.0f} MB |")
PY
