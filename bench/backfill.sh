#!/usr/bin/env bash
# Time to the first job of a backfill, and the event log's size by then: `databuild build` of
# bench/plan.sh's 100,000-partition request (302k job runs; PLAN_SIZE=1m: 1,000,000 partitions,
# 3M runs), beside `analyze` of the same request. The first job notes the time and the log's size,
# then the build is killed (the jobs would take hours). Recorded: backfill.100k.* (backfill.1m.*).
# Usage: [PLAN_SIZE=1m] bench/backfill.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'pkill -9 -f "$work/databuild.toml" 2>/dev/null || true; rm -rf "$work"' EXIT
first="[ -e $work/first ] || { date +%s.%N > $work/first; du -cb $work/.databuild/events.db* | tail -1 | cut -f1 > $work/size; }"
sed -n '/^\[graph\]/,/^TOML/p' bench/plan.sh | sed '$d' \
  | sed "s#command = \[\"true\"\]#command = [\"sh\", \"-c\", \"$first\"]#" > "$work/databuild.toml"
cats=$(seq -s, 0 99 | sed 's/\([0-9]*\)/c\1/g')
last=2022-09-26
[ "${PLAN_SIZE:-100k}" = 1m ] && last=2047-05-18
refs="summary/category={$cats}/date={2020-01-01..$last}"
for i in $(seq "${1:-3}"); do
  rm -rf "$work/.databuild" "$work/first" "$work/size" "$work/data" "$work"/analyze.db*
  # On a log of its own: the build's log holds only what the build wrote.
  /usr/bin/time -f "%e" -o "$work/analyze.time" "$bin" --graph "$work/databuild.toml" --event-log "sqlite:$work/analyze.db" analyze --limit 1 "$refs" > /dev/null
  start=$(date +%s.%N)
  "$bin" --graph "$work/databuild.toml" build --parallel 2 "$refs" > "$work/build.out" 2>&1 &
  pid=$!
  while [ ! -e "$work/size" ]; do
    kill -0 "$pid" 2>/dev/null || { echo "the build ended before a job started:"; tail -5 "$work/build.out"; exit 1; }
    sleep 0.02
  done
  kill -9 "$pid"; wait "$pid" 2>/dev/null || true
  runs=$(grep -o '[0-9]* job runs to run' "$work/build.out" | cut -d' ' -f1)
  # The log itself, once its write-ahead log is checkpointed into it.
  python3 -c "import sqlite3, sys; sqlite3.connect(sys.argv[1]).execute('PRAGMA wal_checkpoint(TRUNCATE)')" "$work/.databuild/events.db"
  db=$(stat -c %s "$work/.databuild/events.db")
  # Listings after the large request: O(page), whatever its size.
  list=$( { /usr/bin/time -f "%e" "$bin" --graph "$work/databuild.toml" builds > /dev/null; } 2>&1 )
  id=$("$bin" --graph "$work/databuild.toml" --json builds | python3 -c "import json, sys; print(json.load(sys.stdin)['builds'][0]['build_request_id'])")
  progress=$( { /usr/bin/time -f "%e" "$bin" --graph "$work/databuild.toml" --json sql "SELECT status, count(*) FROM planned_runs WHERE build_request_id = '$id' AND job = 'reviews' GROUP BY 1" > /dev/null; } 2>&1 )
  detail=$( { /usr/bin/time -f "%e %M" "$bin" --graph "$work/databuild.toml" --json builds "$id" | wc -c > "$work/detail.bytes"; } 2>&1 )
  echo "  builds listing $list s; planned_runs of one job of the build $progress s; the build's detail (builds ID --json) $(echo $detail | cut -d' ' -f1) s, $(( $(echo $detail | cut -d' ' -f2) / 1024 )) MB peak, $(( $(cat "$work/detail.bytes") / 1000 )) kB"
  first_after=$(echo "$(cat "$work/first") - $start" | bc)
  echo "${PLAN_SIZE:-100k}: analyze $(cat "$work/analyze.time") s, first job after $first_after s; $runs planned runs; on disk then $(( $(cat "$work/size") / 1000000 )) MB with the WAL, the log $(( db / 1000000 )) MB ($(( db / runs )) bytes per planned run)"
  echo "$(cat "$work/analyze.time") $first_after $(( db / runs )) $detail $(cat "$work/detail.bytes")" >> "$work/record"
done
python3 - "$work/record" "${PLAN_SIZE:-100k}" "${PLAN_SIZE:+PLAN_SIZE=$PLAN_SIZE }bench/backfill.sh $*" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record, spread
runs = [[float(x) for x in line.split()] for line in open(sys.argv[1])]
command = sys.argv[3].strip()
size = "1m" if sys.argv[2] == "1m" else "100k"
analyze = spread([r[0] for r in runs])
first = spread([r[1] for r in runs])
def text(v):
    return f"{v[0]:.2f}–{v[1]:.2f}" if isinstance(v, list) else f"{v:.2f}"
detail = f"first job after {text(first)} s, `analyze` {text(analyze)} s; {len(runs)} run{'s' if len(runs) > 1 else ''}"
if size == "100k":
    record("backfill.100k.first_job", spread([round(r[1] / r[0], 2) for r in runs]), "×", "<= 1.5",
           "100,000 partitions: time to the first job, over `analyze`'s", detail=detail, command=command)
else:
    record("backfill.1m.first_job", first, "s", "<= 15",
           "1,000,000 partitions: time to the first job", detail=detail, command=command)
record(f"backfill.{size}.bytes_per_run", spread([int(r[2]) for r in runs]), "B", "<= 100",
       f"{'100,000' if size == '100k' else '1,000,000'} partitions: the log's size at the first job, per planned run",
       command=command)
record(f"backfill.{size}.detail", spread([r[3] for r in runs]), "s", None,
       f"{'100,000' if size == '100k' else '1,000,000'} partitions: the killed build's detail (`builds ID --json`)",
       detail=f"{max(r[4] for r in runs) / 1024:.0f} MB peak, {max(r[5] for r in runs) / 1000:.1f} kB of JSON",
       command=command)
PY
