#!/usr/bin/env bash
# The event log's own benchmark (crates/log/benches/log.rs), recorded: whole builds appended in
# batches of ~7,000 events, single-partition status lookups and a page of failed partitions.
#   bench/log.sh [events=1000000]             SQLite; EVENTS may list sizes: 1000000,10000000
#   bench/log.sh EVENTS postgres://ADMIN_URL  on PostgreSQL, in a fresh database on that server
# Recorded: log.<events>.append, .status (p99), .failed (p99); on PostgreSQL postgres.<events>.append.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-1000000}
url=${2:-}
work=$(mktemp -d)
db=""
cleanup() {
  [ -n "$db" ] && psql -q "$url" -c "DROP DATABASE IF EXISTS $db" || true
  rm -rf "$work"
}
trap cleanup EXIT
if [ -n "$url" ]; then
  db="bench_log_$(date +%s%N)"
  psql -q "$url" -c "CREATE DATABASE $db"
  export LOG_BENCH_POSTGRES="${url%/*}/$db"
fi
LOG_BENCH_EVENTS="$events" cargo bench -q -p databuild-log --bench log | tee "$work/out"
python3 - "$work/out" "$events" "bench/log.sh $events${url:+ URL}" "${url:+postgres}" <<'PY'
import re, sys
sys.path.insert(0, "bench")
from record import record, label
sizes, command, postgres = sys.argv[2].split(","), sys.argv[3], sys.argv[4]
# | events | append (batched) | commits of one run's events | status p50 / p99 | failed p50 / p99 | file size |
row = re.compile(r"^\|\s*(\d+) \|\s*([0-9.]+) ev/s \|\s*([0-9.]+) /s \|\s*([0-9.]+) µs /\s*([0-9.]+) µs \|"
                 r"\s*([0-9.]+) ms /\s*([0-9.]+) ms \|\s*(\d+) MB \|$")
rows = [m.groups() for m in (row.match(line.strip()) for line in open(sys.argv[1])) if m]
# One row per size asked for, in order; a size is named as asked (the log holds whole builds, a
# few more events).
for asked, (events, rate, commits, s50, s99, f50, f99, size) in zip(sizes, rows):
    n = label(asked)
    if postgres:
        record(f"postgres.{n}.append", round(float(rate)), "ev/s", ">= 50000",
               f"appends in batches of ~7,000 events to a PostgreSQL log of {n} events",
               detail=f"{float(commits):,.0f} commits of one run's events a second; status lookup p50 {s50} µs",
               command=command)
        continue
    record(f"log.{n}.append", round(float(rate)), "ev/s", ">= 200000",
           f"appends in batches of ~7,000 events, a log of {n} events",
           detail=f"{float(commits):,.0f} commits of one run's events a second; {int(size):,} MB", command=command)
    record(f"log.{n}.status", round(float(s99) / 1000, 4), "ms", "<= 1",
           f"a partition's status lookup (p99), a log of {n} events", detail=f"p50 {s50} µs", command=command)
    record(f"log.{n}.failed", float(f99), "ms", "<= 50",
           f"`partitions --status failed --limit 50` (p99), a log of {n} events", detail=f"p50 {f50} ms", command=command)
PY
