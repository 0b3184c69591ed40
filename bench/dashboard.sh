#!/usr/bin/env bash
# Dashboard page times with ~1M partitions in the log (written by the event-log benchmark):
# every page fetched 20 times with curl on loopback; prints the median and the slowest (recorded:
# dashboard.<events>.slowest, the slowest fetch of any page).
# Usage: bench/dashboard.sh [events=10000000]
set -euo pipefail
cd "$(dirname "$0")/.."
work=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
LOG_BENCH_KEEP="$work/events.db" LOG_BENCH_EVENTS=${1:-10000000} cargo bench -q -p databuild-log --bench log
cargo build --release -q -p databuild
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "dashboard_bench"
[[job]]
name = "reviews"
outputs = ["reviews/category={category}/date={day}"]
command = ["true"]
TOML
db() { ./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" "$@"; }
sql() { db --json sql "$1" | python3 -c 'import json,sys; print(*json.load(sys.stdin)["rows"][0], sep=".")'; }
if curl -sf http://127.0.0.1:18182/healthz >/dev/null; then echo "port 18182 is taken" >&2; exit 1; fi
# The binary itself in the background (not the function: `$!` must be the server, for the trap).
./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" \
  serve --bind 127.0.0.1:18182 2>"$work/serve.log" &
server=$!
for _ in $(seq 100); do curl -sf http://127.0.0.1:18182/healthz >/dev/null && break; sleep 0.1; done
echo "partitions in the log: $(sql 'SELECT count(*) FROM partitions'), events: $(sql 'SELECT max(idx) FROM events')"
# The cursor of the builds page 100 pages deep (keyset: as cheap as the first).
deep=$(sql 'SELECT created_at, build_request_id FROM build_requests ORDER BY created_at DESC, build_request_id LIMIT 1 OFFSET 5000')
run=$(sql "SELECT job_run_id FROM job_runs WHERE build_request_id = 'br-500' LIMIT 1")
for page in / /graph /builds "/builds?status=failed" "/builds?from=2020-01-01&to=2100-01-01" "/builds?after=$deep" \
  "/builds/br-500" "/builds/br-500?graph=runs" "/runs/$run" \
  /partitions "/partitions?status=failed" "/partitions?pattern=reviews/category%3Dc7/*" \
  /datasets /datasets/reviews "/datasets/reviews?state=failed" "/datasets/reviews?rows_after=c50" \
  /jobs /jobs/reviews "/partitions/reviews%2Fcategory%3Dc7%2Fdate%3Dd500" /sources /wants; do
  times=$(for _ in $(seq 20); do curl -s -o /dev/null -w '%{http_code} %{time_total}\n' "http://127.0.0.1:18182$page"; done | sort -k2 -n)
  code=$(echo "$times" | head -1 | cut -d' ' -f1)
  echo "$page HTTP $code median $(echo "$times" | sed -n 10p | cut -d' ' -f2) s, max $(echo "$times" | tail -1 | cut -d' ' -f2) s"
  echo "$page $code $(echo "$times" | sed -n 10p | cut -d' ' -f2) $(echo "$times" | tail -1 | cut -d' ' -f2)" >> "$work/record"
done
python3 - "$work/record" "${1:-10000000}" "bench/dashboard.sh $*" "$(sql 'SELECT count(*) FROM partitions')" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record, label
pages = [line.split() for line in open(sys.argv[1])]
failed = [p for p, code, _, _ in pages if code != "200"]
if failed:
    sys.exit(f"not recorded: pages answered with an error: {failed}")
slowest = max(pages, key=lambda p: float(p[3]))
medians = [float(p[2]) * 1e3 for p in pages]
record(f"dashboard.{label(sys.argv[2])}.slowest", round(float(slowest[3]) * 1e3, 1), "ms", "<= 100",
       f"the slowest fetch of any of {len(pages)} dashboard pages, {label(sys.argv[2])} events ({int(sys.argv[4]):,} partitions)",
       detail=f"`{slowest[0]}`; medians {min(medians):.1f}–{max(medians):.1f} ms", command=sys.argv[3].strip())
PY
