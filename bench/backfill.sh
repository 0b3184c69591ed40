#!/usr/bin/env bash
# Time to the first job of a backfill, and the event log's size by then: `databuild build` of
# bench/plan.sh's 100,000-partition request (302k job runs; PLAN_SIZE=1m: 1,000,000 partitions,
# 3M runs), beside `analyze` of the same request. The first job notes the time and the log's size,
# then the build is killed (the jobs would take hours). Usage: [PLAN_SIZE=1m] bench/backfill.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p databuild
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
  echo "${PLAN_SIZE:-100k}: analyze $(cat "$work/analyze.time") s, first job after $(echo "$(cat "$work/first") - $start" | bc) s; $runs planned runs; on disk then $(( $(cat "$work/size") / 1000000 )) MB with the WAL, the log $(( db / 1000000 )) MB ($(( db / runs )) bytes per planned run)"
done
