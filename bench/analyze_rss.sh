#!/usr/bin/env bash
# One `POST /api/v1/analyze` of 1,000,000 refs of a one-job graph against a running `serve`:
# the service's peak RSS (VmHWM) after it, the answer's size, the time it took and what it
# wrote to the log (recorded: analyze.1m.rss, analyze.1m.bytes, analyze.1m.time, analyze.1m.log).
# Usage: bench/analyze_rss.sh [runs=1]   (DATABUILD_BIN=PATH: that binary, unbuilt;
#        PEER_BIN=PATH: another binary measured alternately, "compared with", named by PEER_NAME)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'kill "${server:-0}" 2>/dev/null || true; rm -rf "$work"' EXIT
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "analyze_bench"
[[job]]
name = "clean"
outputs = ["clean/date={date:date}"]
command = ["true"]
TOML
port=18283
# measure BIN OUT: one analyze against a fresh service of BIN; "seconds bytes peak-KB log-bytes"
# to OUT.
measure() {
  rm -f "$work/events.db"*
  "$1" --graph "$work/databuild.toml" --event-log "sqlite:$work/events.db" serve --bind 127.0.0.1:$port 2> "$work/serve.log" &
  server=$!
  for _ in $(seq 100); do curl -sf http://127.0.0.1:$port/healthz >/dev/null && break; sleep 0.1; done
  # 1,000,000 days: 1000-01-01 to 3737-11-26.
  curl -s -o "$work/answer.json" -w '%{http_code} %{size_download} %{time_total}\n' \
    -H 'content-type: application/json' \
    -d '{"partitions": ["clean/date={1000-01-01..3737-11-26}"]}' \
    http://127.0.0.1:$port/api/v1/analyze > "$work/curl.txt"
  read -r code bytes seconds < "$work/curl.txt"
  peak=$(awk '/VmHWM/ {print $2}' /proc/$server/status)
  kill "$server"; wait "$server" 2>/dev/null || true
  log=$(cat "$work"/events.db* | wc -c)
  [ "$code" = 200 ] || { echo "analyze answered $code: $(head -c 300 "$work/answer.json")"; exit 1; }
  echo "$1: $seconds s, $bytes bytes, peak RSS $((peak / 1024)) MB, log $log bytes"
  echo "$seconds $bytes $peak $log" >> "$2"
}
touch "$work/peer"
for _ in $(seq "${1:-1}"); do
  measure "$bin" "$work/runs"
  [ -z "${PEER_BIN:-}" ] || measure "$PEER_BIN" "$work/peer"
done
python3 - "$work/runs" "$work/peer" "bench/analyze_rss.sh $*" "${PEER_NAME:-PEER_BIN}" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record, spread
runs = [line.split() for line in open(sys.argv[1])]
peer = [line.split() for line in open(sys.argv[2])]
command = sys.argv[3].strip()
what = "`POST /api/v1/analyze` of 1,000,000 refs (one job) to `serve`"
n = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
def figures(rows):
    return {"rss": spread([round(int(kb) / 1024) for _, _, kb, _ in rows]),
            "bytes": spread([int(b) for _, b, _, _ in rows]),
            "time": spread([float(s) for s, _, _, _ in rows]),
            "log": spread([int(log) for _, _, _, log in rows])}
mine = figures(runs)
theirs = figures(peer) if peer else None
def before(key, unit):
    if not theirs:
        return None
    v = theirs[key]
    shown = f"{v[0]:,}–{v[1]:,}" if isinstance(v, list) else f"{v:,}"
    return f"{sys.argv[4]}: {shown} {unit}"
record("analyze.1m.rss", mine["rss"], "MB", "<= 500", what + ": the service's peak RSS",
       peer=before("rss", "MB"), detail=n, command=command)
record("analyze.1m.bytes", mine["bytes"], "bytes", "<= 1000000", what + ": the answer's size (a page)",
       peer=before("bytes", "bytes"), detail=n, command=command)
record("analyze.1m.time", mine["time"], "s", "<= 10", what + ": wall",
       peer=before("time", "s"), detail=n, command=command)
record("analyze.1m.log", mine["log"], "bytes", "<= 1000000",
       what + ": what it wrote to the log (database and WAL)",
       peer=before("log", "bytes"), detail=n, command=command)
PY
