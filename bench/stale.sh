#!/usr/bin/env bash
# Listing stale and live partitions in a large log: one page of `partitions --status stale|live`,
# and `datasets`, against the log benchmark's log (7 events a partition; 7M events ~ 1M partitions).
#   bench/stale.sh [events=7000000] [version=1]
# With `version` other than the one the log's runs recorded, every partition is stale; with the
# same, none is, and a page of `stale` scans its bounded budget (views::FRESHNESS_SCAN) and stops.
set -euo pipefail
cd "$(dirname "$0")/.."
events=${1:-7000000}
version=${2:-1}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
LOG_BENCH_KEEP="$work/events.db" LOG_BENCH_EVENTS="$events" cargo bench -q -p databuild-log --bench log >/dev/null
cargo build --release -q -p databuild
cat > "$work/databuild.toml" <<TOML
[graph]
name = "stale_bench"
[[job]]
name = "reviews"
outputs = ["reviews/category={category}/date={day}"]
version = "$version"
command = ["true"]
TOML
db() { ./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" "$@"; }
echo "partitions in the log: $(db sql 'SELECT count(*) FROM partitions' --json | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0][0])')"
for args in "partitions --status stale --limit 100" "partitions --status live --limit 100" "partitions --status failed --limit 100" "datasets"; do
  start=$(date +%s%N)
  found=$(db --json $args | python3 -c 'import json,sys; v=json.load(sys.stdin); print(len(v.get("partitions", v.get("datasets", []))), "next" if v.get("next") else "")')
  end=$(date +%s%N)
  printf '%-42s %8.3f s  (%s)\n' "$args" "$(awk -v n=$((end - start)) 'BEGIN{print n/1e9}')" "$found"
done
