#!/usr/bin/env bash
# Plans a 4-level graph for 100,000 requested partitions with the real `databuild analyze`, and
# reports wall time and peak memory. Usage: [PLAN_SIZE=1m] bench/plan.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p databuild
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
  /usr/bin/time -f "analyze ${PLAN_SIZE:-100k}: %e s wall, %M KB peak RSS" "$bin" --graph "$work/databuild.toml" analyze --limit 1 "$refs" > "$work/out.txt"
done
head -1 "$work/out.txt"
