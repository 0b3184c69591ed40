#!/usr/bin/env bash
# Forecasts (#60). The cadence model replayed over synthetic histories (the bench binary
# `crates/core/benches/forecast.rs`: daily on weekdays, hourly with jitter and 5% outliers, a
# cadence change halfway), each arrival predicted from those before it: forecast.error.* (median
# absolute error of expected_at, minutes) and forecast.coverage.* (share of arrivals inside
# [expected_at - (expected_by - expected_at), expected_by]). Then the latency of `databuild
# forecast` of a partition with 1,000 upstream runs to go (a `sum` reading 1,000 days of `day`,
# each reading an external raw day, the last not landed yet; jobs timed by an earlier build):
# forecast.latency.1k, the median wall of the command over 5 runs.
# Usage: bench/forecast.sh   (DATABUILD_BIN=PATH: that binary, unbuilt)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cargo bench -q -p databuild-core --bench forecast 2>/dev/null | grep '^{' > "$work/replay.jsonl"
cat "$work/replay.jsonl"
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "forecast_bench"
[[dataset]]
name = "raw"
pattern = "raw/date={date:date}"
[[job]]
name = "day"
outputs = ["day/date={date:date}"]
inputs = ["raw/date={date}"]
command = ["sh", "-c", "mkdir -p \"$DATABUILD_OUTPUT_DIR/day\" && touch \"$DATABUILD_OUTPUT_DIR/day/date=$DATABUILD_FIELD_DATE\""]
[[job]]
name = "sum"
outputs = ["sum/date={date:date}"]
inputs = ["day/date={date-999d..date}"]
command = ["sh", "-c", "mkdir -p \"$DATABUILD_OUTPUT_DIR/sum\" && touch \"$DATABUILD_OUTPUT_DIR/sum/date=$DATABUILD_FIELD_DATE\""]
TOML
db() { "$bin" --graph "$work/databuild.toml" "$@"; }
# Raw days 2020-01-01 .. 2025-09-20 (2,090 days) land; the first 1,000 days and
# one sum are built (timing both jobs); the sum of 2025-09-21, whose raw day has not landed,
# has 1,000 day runs to go, none built.
python3 - "$work/data/raw" <<'PY'
import datetime, os, sys
day = datetime.date(2020, 1, 1)
for _ in range(2090):
    os.makedirs(sys.argv[1], exist_ok=True)
    open(os.path.join(sys.argv[1], f"date={day}"), "w").close()
    day += datetime.timedelta(days=1)
PY
db status 'raw/date={2020-01-01..2025-09-20}' > /dev/null
db build --parallel 8 'sum/date=2022-09-26' > /dev/null 2>&1
target='sum/date=2025-09-21'
db --json forecast "$target" > "$work/forecast.json"
python3 -c "
import json, sys
f = json.load(open(sys.argv[1]))[0]
runs = sum(s['runs'] for s in f['basis'] if s['step'] == 'job')
assert runs == 1001, (runs, f)
assert f['expected_at'] is not None, f
print(f\"{f['ref']}: {runs} runs to go, expected at {f['expected_at']}\")
" "$work/forecast.json"
for _ in 1 2 3 4 5; do
  t0=$(date +%s%N); db --json forecast "$target" > /dev/null; t1=$(date +%s%N)
  echo $(( (t1 - t0) / 1000000 )) >> "$work/latency"
done
python3 - "$work/replay.jsonl" "$work/latency" <<'PY'
import json, statistics, sys
sys.path.insert(0, "bench")
from record import record
command = "bench/forecast.sh"
what = {
    "daily": "180 days, weekdays only, 2 h after the day ± ~20 min",
    "hourly": "20 days of hours, 10 min ± 5 min after the hour, 5% 1-3 h late",
    "change": "120 days, 1 h after the day, then 4 h from day 60",
}
for line in open(sys.argv[1]):
    r = json.loads(line)
    h = r["history"]
    detail = f"{r['predicted']} arrivals replayed, each from those before it"
    record(f"forecast.error.{h}", r["error_min"], "min", None,
           f"forecast of an arrival ({what[h]}): median absolute error of expected_at",
           detail=detail, command=command)
    record(f"forecast.coverage.{h}", round(100 * r["coverage"], 1), "%", None,
           f"share of arrivals ({what[h]}) inside [expected_at - (expected_by - expected_at), expected_by]",
           detail=detail, command=command)
ms = [int(x) for x in open(sys.argv[2])]
record("forecast.latency.1k", statistics.median(ms), "ms", "<= 50",
       "`databuild forecast` of a partition with 1,000 upstream runs to go and a missing external input: wall",
       detail=f"median of {len(ms)} runs (whole command: start, graph, plan, history reads)", command=command)
PY
