#!/usr/bin/env bash
# Dashboard page times with ~1M partitions in the log (7M events written by the event-log
# benchmark): each page fetched 20 times with curl on loopback; prints the median.
# Usage: bench/dashboard.sh [events=7000000]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
LOG_BENCH_KEEP="$work/events.db" LOG_BENCH_EVENTS=${1:-7000000} cargo bench -q -p databuild-log --bench log
cargo build --release -q -p databuild
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "dashboard_bench"
[[job]]
name = "reviews"
outputs = ["reviews/category={category}/date={day}"]
command = ["true"]
TOML
./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" serve --bind 127.0.0.1:18182 2>"$work/serve.log" &
server=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18182/healthz >/dev/null && break; sleep 0.1; done
echo "partitions in the log: $(./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" --json sql 'SELECT count(*) FROM partitions' | python3 -c 'import json,sys; print(json.load(sys.stdin)["rows"][0][0])')"
for page in / /partitions "/partitions?status=failed" "/partitions?pattern=reviews/category%3Dc7/*" /datasets /jobs /jobs/reviews "/partitions/reviews%2Fcategory%3Dc7%2Fdate%3Dd500" "/builds/br-500"; do
  times=$(for _ in $(seq 20); do curl -s -o /dev/null -w '%{time_total}\n' "http://127.0.0.1:18182$page"; done | sort -n)
  echo "$page median $(echo "$times" | sed -n 10p) s, max $(echo "$times" | tail -1) s"
done
