#!/usr/bin/env bash
# Load on the service: wrk against /api/v1/partitions/{ref}/status with a log of 1M events
# (recorded: service.status.rps, service.status.p99).
# Usage: bench/service.sh [duration=20s] [connections=32]
set -euo pipefail
cd "$(dirname "$0")/.."
command -v wrk >/dev/null || { echo "wrk is needed: apt-get install -y wrk"; exit 1; }
work=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
LOG_BENCH_KEEP="$work/events.db" LOG_BENCH_EVENTS=1000000 cargo bench -q -p databuild-log --bench log
cargo build --release -q -p databuild
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "service_bench"
[[job]]
name = "reviews"
outputs = ["reviews/category={category}/date={day}"]
command = ["true"]
TOML
./target/release/databuild --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" serve --bind 127.0.0.1:18181 2> "$work/serve.log" &
server=$!
for _ in $(seq 50); do curl -sf http://127.0.0.1:18181/healthz >/dev/null && break; sleep 0.1; done
curl -s http://127.0.0.1:18181/api/v1/partitions/reviews%2Fcategory=c7%2Fdate=d500/status; echo
wrk -t 2 -c "${2:-32}" -d "${1:-20s}" --latency http://127.0.0.1:18181/api/v1/partitions/reviews%2Fcategory=c7%2Fdate=d500/status | tee "$work/wrk.txt"
python3 - "$work/wrk.txt" "bench/service.sh $*" "${2:-32}" <<'PY'
import re, sys
sys.path.insert(0, "bench")
from record import record
out = open(sys.argv[1]).read()
def ms(percent):
    value, unit = re.search(rf"^\s*{percent}%\s+([0-9.]+)(us|ms|s)\s*$", out, re.M).groups()
    return float(value) * {"us": 1e-3, "ms": 1, "s": 1e3}[unit]
rps = float(re.search(r"Requests/sec:\s*([0-9.]+)", out).group(1))
what = f"`GET /api/v1/partitions/{{ref}}/status`, 1M events, `wrk -t 2 -c {sys.argv[3]}`"
latency = f"p50 {ms(50):.2f} ms, p90 {ms(90):.2f} ms, p99 {ms(99):.2f} ms"
record("service.status.rps", round(rps), "req/s", ">= 10000", what + ": throughput", detail=latency, command=sys.argv[2].strip())
record("service.status.p99", round(ms(99), 2), "ms", "<= 10", what + ": p99 latency", detail=f"{round(rps):,} req/s", command=sys.argv[2].strip())
PY
