#!/usr/bin/env bash
# Plans a 4-level graph for 100,000 requested partitions with the real `databuild analyze`, and
# reports wall time and peak memory. Usage: bench/plan.sh [runs]
set -euo pipefail
cd "$(dirname "$0")/.."
cargo build --release -q -p databuild
bin="$PWD/target/release/databuild"
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
refs="summary/category={$cats}/date={2020-01-01..2022-09-26}"   # 100 x 1000 = 100,000 refs
for i in $(seq "${1:-3}"); do
  /usr/bin/time -f "analyze 100k: %e s wall, %M KB peak RSS" "$bin" --graph "$work/databuild.toml" analyze "$refs" > "$work/out.txt"
done
head -1 "$work/out.txt"
