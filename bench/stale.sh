#!/usr/bin/env bash
# Listing stale and live partitions in a large log: one page of `partitions --status stale|live`,
# `partitions --status failed` for comparison, `datasets` and `datasets --exact`, against the log benchmark's log
# (7 events a partition: 7M events ~ 1M partitions), with every partition's data file present.
#   bench/stale.sh [events=7000000]
# The log benchmark's runs record no job version, so every available partition is stale: a page
# of `stale` fills at once, and a page of `live` finds none and stops at its bounded budget
# (views::FRESHNESS_SCAN partitions checked), the worst case of a page. Timed with the graph's
# job version unset and set. Recorded: stale.<events>.* (the time with the version unset; the
# detail, with it set).
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-7000000}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LOG_BENCH_KEEP="$work/events.db" LOG_BENCH_EVENTS="$events" cargo bench -q -p databuild-log --bench log >/dev/null
cargo build --release -q -p databuild
db() { ./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" "$@"; }
graph() {
  cat > "$work/databuild.toml" <<TOML
[graph]
name = "stale_bench"
[[job]]
name = "reviews"
outputs = ["reviews/category={category}/date={day}"]
$1
command = ["true"]
TOML
}
graph ""
# Each partition's data, as a job would have left it (a deleted one would read as missing).
python3 - "$work" <<'PY'
import os, sqlite3, sys
work = sys.argv[1]
for (r,) in sqlite3.connect(f"file:{work}/events.db?mode=ro", uri=True).execute("SELECT partition_ref FROM partitions"):
    p = os.path.join(work, "data", r)
    os.makedirs(os.path.dirname(p), exist_ok=True)
    open(p, "w").close()
PY
echo "partitions in the log: $(db --json sql 'SELECT count(*) FROM partitions' | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0][0])')"
for version in "" 'version = "2"'; do
  graph "$version"
  echo "job version: ${version:-as recorded}"
  for args in "partitions --status stale --limit 100" "partitions --status live --limit 100" "partitions --status failed --limit 100" "datasets" "datasets --exact"; do
    start=$(date +%s%N)
    found=$(db --json $args | python3 -c 'import json,sys; v=json.load(sys.stdin); print(v["datasets"][0]["partitions"] if "datasets" in v else len(v["partitions"]), "(next page)" if v.get("next") else "")')
    end=$(date +%s%N)
    seconds=$(awk -v n=$((end - start)) 'BEGIN{print n/1e9}')
    printf '  %-40s %8.3f s  %s\n' "$args" "$seconds" "$found"
    printf '%s\t%s\t%s\t%s\n' "${version:+2}" "$args" "$seconds" "$found" >> "$work/record"
  done
done
python3 - "$work/record" "$events" "bench/stale.sh $*" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record, label
rows = [line.rstrip("\n").split("\t") for line in open(sys.argv[1])]
size, command = label(sys.argv[2]), sys.argv[3].strip()
names = {"partitions --status stale --limit 100": ("stale_page", "a page of 100 `partitions --status stale`"),
         "partitions --status live --limit 100": ("live_page", "a page of 100 `partitions --status live` (none live: the whole budget)"),
         "partitions --status failed --limit 100": ("failed_page", "a page of 100 `partitions --status failed`"),
         "datasets": ("datasets", "`datasets` (counts as recorded above 20,000 partitions)"),
         "datasets --exact": ("datasets_exact", "`datasets --exact` (every partition's freshness derived)")}
for args, (name, what) in names.items():
    unset = next(r for r in rows if r[0] == "" and r[1] == args)
    changed = next(r for r in rows if r[0] == "2" and r[1] == args)
    record(f"stale.{size}.{name}", round(float(unset[2]), 3), "s", None, f"{what}, a log of {size} events",
           detail=f"`version = \"2\"`: {float(changed[2]):.3f} s; found {unset[3].strip()}", command=command)
PY
