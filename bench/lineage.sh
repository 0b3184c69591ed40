#!/usr/bin/env bash
# Lineage at scale: the lineage benchmark's log (a four-level chain, 6 events a partition: 10M
# events ~ 1.65M partitions), the index's append cost, then `databuild lineage` up and down
# (depth 3) through the real binary, each timed end to end
# (process start and graph load included), medians of N runs (recorded: lineage.<events>.*).
#   bench/lineage.sh [events=10000000] [runs=5]
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-10000000}
runs=${2:-5}
args_given="$*"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LINEAGE_BENCH_KEEP="$work/events.db" LINEAGE_BENCH_EVENTS="$events" cargo bench -q -p databuild-log --bench lineage
cargo build --release -q -p databuild
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "lineage_bench"
[[dataset]]
name = "raw"
pattern = "raw/p={p:int}"
[[job]]
name = "l0"
outputs = ["l0/p={p:int}"]
inputs = ["raw/p={p}"]
command = ["true"]
[[job]]
name = "l1"
outputs = ["l1/p={p:int}"]
inputs = ["l0/p={p}"]
command = ["true"]
[[job]]
name = "l2"
outputs = ["l2/p={p:int}"]
inputs = ["l1/p={p}"]
command = ["true"]
[[job]]
name = "l3"
outputs = ["l3/p={p:int}"]
inputs = ["l2/p={p}", "l1/p={p}"]
command = ["true"]
TOML
db() { ./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" "$@"; }
p=$(db --json sql "SELECT count(*) FROM partitions WHERE partition_ref GLOB 'l0/*'" | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0][0] // 2)')
echo "partitions: $(db --json sql 'SELECT count(*) FROM partitions' | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0][0])'), events: $(db --json sql 'SELECT max(idx) FROM events' | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0][0])'); timing partition p=$p"
# time_it LABEL MEASURE CMD...: a table row; MEASURE (unless "-") is recorded, goal 50 ms.
time_it() {
  local label=$1 measure=$2; shift 2
  python3 - "$runs" "$label" "$measure" "bench/lineage.sh $args_given" "$@" <<'PY'
import statistics, subprocess, sys, time
sys.path.insert(0, "bench")
from record import record
runs, label, measure, command, cmd = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4].strip(), sys.argv[5:]
times = []
for _ in range(runs):
    start = time.perf_counter()
    out = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    times.append(time.perf_counter() - start)
    if out.returncode != 0:
        sys.exit(f"{label}: exit {out.returncode}: {out.stderr.decode()}")
print(f"| {label} | {statistics.median(times)*1000:.0f} ms | {min(times)*1000:.0f} ms |")
if measure != "-":
    what = "`lineage --downstream --depth 3`" if "--downstream" in cmd else "`lineage --depth 3` (upstream)"
    record(measure, round(statistics.median(times) * 1000), "ms", "<= 50", f"{what}, a log of {measure.split('.')[1]} events",
           detail=f"median of {runs}, min {min(times) * 1000:.0f} ms", command=command)
PY
}
bin=./target/release/databuild
args=(--graph "$work/databuild.toml" --event-log "sqlite:$work/events.db")
echo "| command | median | min |"
echo "|---|---:|---:|"
size=$(python3 -c 'import sys; sys.path.insert(0, "bench"); from record import label; print(label(sys.argv[1]))' "$events")
time_it "lineage l3/p=$p --depth 3 (upstream)" "lineage.$size.upstream" $bin "${args[@]}" --json lineage "l3/p=$p" --depth 3
time_it "lineage l0/p=$p --downstream --depth 3" "lineage.$size.downstream" $bin "${args[@]}" --json lineage "l0/p=$p" --downstream --depth 3
time_it "status l3/p=$p (for scale: a process and a lookup)" - $bin "${args[@]}" --json status "l3/p=$p"
