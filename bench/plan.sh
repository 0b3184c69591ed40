#!/usr/bin/env bash
# Plans a 4-level graph for 100,000 requested partitions with the real `databuild analyze`, and
# reports wall time and peak memory (recorded: plan.100k.*, or plan.1m.* with PLAN_SIZE=1m).
# Usage: [PLAN_SIZE=1m] bench/plan.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "plan_bench"
[[job]]
name = "reviews"
outputs = ["reviews/date={date:date}"]
command = ["true"]
[[job]]
name = "categorized"
outputs = ["categorized/category={category}/date={date:date}"]
inputs = ["reviews/date={date}"]
command = ["true"]
[[job]]
name = "phrases"
outputs = ["phrases/category={category}/date={date:date}"]
inputs = ["categorized/category={category}/date={date-6d..date}"]
command = ["true"]
[[job]]
name = "summary"
outputs = ["summary/category={category}/date={date:date}"]
inputs = ["phrases/category={category}/date={date}", "reviews/date={date}"]
command = ["true"]
TOML
cats=$(seq -s, 0 99 | sed 's/\([0-9]*\)/c\1/g')
# 100 categories x 1,000 days = 100,000 refs; PLAN_SIZE=1m: x 10,000 days = 1,000,000 refs.
last=2022-09-26
[ "${PLAN_SIZE:-100k}" = 1m ] && last=2047-05-18
refs="summary/category={$cats}/date={2020-01-01..$last}"
for i in $(seq "${1:-3}"); do
  /usr/bin/time -f "%e %M" -o "$work/time" "$bin" --graph "$work/databuild.toml" analyze --limit 1 "$refs" > "$work/out.txt"
  read -r seconds kb < "$work/time"
  echo "analyze ${PLAN_SIZE:-100k}: $seconds s wall, $kb KB peak RSS"
  echo "$seconds $kb" >> "$work/runs"
done
head -1 "$work/out.txt"
python3 - "$work/runs" "${PLAN_SIZE:-100k}" "${PLAN_SIZE:+PLAN_SIZE=$PLAN_SIZE }bench/plan.sh $*" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record, spread
runs = [line.split() for line in open(sys.argv[1])]
command = sys.argv[3].strip()
if sys.argv[2] == "1m":
    size, what, time_goal, rss_goal = "1m", "1,000,000 requested partitions (3,010,606 runs)", "<= 10", None
else:
    size, what, time_goal, rss_goal = "100k", "100,000 requested partitions (301,606 runs)", "<= 1", "<= 500"
n = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
record(f"plan.{size}.time", spread([float(s) for s, _ in runs]), "s", time_goal,
       f"`analyze` of {what}, wall", detail=n, command=command)
record(f"plan.{size}.rss", spread([round(int(kb) / 1024) for _, kb in runs]), "MB", rss_goal,
       f"`analyze` of {what}, peak RSS", detail=n, command=command)
PY
