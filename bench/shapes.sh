#!/usr/bin/env bash
# DataBuild beside `make -j2` on several workload shapes (bench/shapes/generate.py): a build from
# scratch and the no-op rerun, alternating make and DataBuild in each round so the machine's drift
# stays out of the ratios. Reports medians of wall time, DataBuild's own CPU per job (its CPU,
# jobs included, minus make's over the same jobs) and peak RSS; recorded as
# shapes.<jobs>.<shape>.{build,noop,cpu,rss_build,rss_noop} (2700 jobs is 2.7k, 24000 is 24k).
#   bench/shapes.sh [rounds=3] [jobs=2700] [shapes="dates categories deep fanin"]
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
rounds=${1:-3}
jobs=${2:-2700}
shapes=${3:-dates categories deep fanin}
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
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
# The command as given, for the record: a list of shapes quoted.
given=()
for arg in "$@"; do [[ $arg == *" "* ]] && arg="\"$arg\""; given+=("$arg"); done
python3 - "$work/results" "$work/jobs" "$jobs" "$rounds" "bench/shapes.sh ${given[*]}" <<'PY'
import statistics, sys
sys.path.insert(0, "bench")
from record import record
rows = [l.split() for l in open(sys.argv[1])]
jobs = dict(l.split() for l in open(sys.argv[2]))
def med(shape, system, scenario, col):
    return statistics.median(float(r[col]) for r in rows if r[:3] == [shape, system, scenario])
print("| shape | jobs | make build | databuild build | ratio | make no-op | databuild no-op | ratio | own CPU per job (build) | peak RSS build / no-op |")
print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
rows_of = []
for shape in jobs:
    n = int(jobs[shape])
    mb, db = med(shape, "make", "build", 3), med(shape, "databuild", "build", 3)
    mn, dn = med(shape, "make", "noop", 3), med(shape, "databuild", "noop", 3)
    cpu = (med(shape, "databuild", "build", 4) - med(shape, "make", "build", 4)) / n * 1e3
    rb, rn = med(shape, "databuild", "build", 5) / 1024, med(shape, "databuild", "noop", 5) / 1024
    print(f"| {shape} | {n:,} | {mb:.2f} s | {db:.2f} s | {db / mb:.2f}× | {mn:.3f} s | {dn:.3f} s | {dn / mn:.2f}× | {cpu:.2f} ms | {rb:.0f} / {rn:.0f} MB |")
    rows_of.append((shape, n, mb, db, mn, dn, cpu, rb, rn))
# The goals of #32, at the two sizes it set them for.
size = {"2700": "2.7k", "24000": "24k"}.get(sys.argv[3], sys.argv[3])
goals = {"2.7k": {"build": "<= 1.2", "cpu": "<= 0.3"},
         "24k": {"build": "<= 1.1", "noop": "<= 1.0", "cpu": "<= 0.3", "rss_build": "<= 100", "rss_noop": "<= 60"}}.get(size, {})
rounds, command = sys.argv[4], sys.argv[5].strip()
for shape, n, mb, db, mn, dn, cpu, rb, rn in rows_of:
    base = f"shapes.{size}.{shape}"
    of = f"{shape} ({n:,} jobs)"
    median = f"median of {rounds} round{'s' if rounds != '1' else ''}"
    record(f"{base}.build", round(db / mb, 2), "×", goals.get("build"), f"{of}: build, over `make -j2`'s",
           detail=f"{db:.2f} s, {median}", peer=f"make {mb:.2f} s", command=command)
    record(f"{base}.noop", round(dn / mn, 2), "×", goals.get("noop"), f"{of}: no-op rerun, over make's",
           detail=f"{dn:.3f} s, {median}", peer=f"make {mn:.3f} s", command=command)
    record(f"{base}.cpu", round(cpu, 2), "ms", goals.get("cpu"), f"{of}: own CPU per job beyond make's (build)",
           detail=median, command=command)
    record(f"{base}.rss_build", round(rb), "MB", goals.get("rss_build"), f"{of}: peak RSS of the build",
           detail=median, command=command)
    record(f"{base}.rss_noop", round(rn), "MB", goals.get("rss_noop"), f"{of}: peak RSS of the no-op",
           detail=median, command=command)
PY
