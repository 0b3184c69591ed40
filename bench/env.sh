#!/usr/bin/env bash
# Environments (#59): a graph of 1,000 `gen` partitions and 1,000 `agg` reading them is built in
# prod; `dev` is made, `agg`'s script edited and all of `agg` built in dev (every `gen` run is
# reused: linked, not run), then promoted to prod and rolled back. Recorded: env.promote.1k and
# env.rollback.1k (wall of the command, 1,000 partitions), env.reuse.data_bytes (the disk the
# 1,000 reused partitions take in dev's data dir, per partition, counted by `du` beside prod's
# so shared blocks count once) and env.reuse.log_bytes (dev's log per run it recorded).
# Usage: bench/env.sh [runs=1]   (DATABUILD_BIN=PATH: that binary, unbuilt)
set -euo pipefail
cd "$(dirname "$0")/.."
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat > "$work/databuild.toml" <<'TOML'
[graph]
name = "env_bench"
[[job]]
name = "gen"
outputs = ["gen/{n:int}"]
command = ["sh", "gen.sh"]
[[job]]
name = "agg"
outputs = ["agg/{n:int}"]
inputs = ["gen/{n}"]
command = ["sh", "agg.sh"]
TOML
cat > "$work/gen.sh" <<'SH'
out=$(echo "$DATABUILD_OUTPUTS" | tr -d '[]"')
mkdir -p "$DATABUILD_OUTPUT_DIR/gen"
echo "row,$out" > "$DATABUILD_OUTPUT_DIR/$out"
SH
# seconds of a command's wall time
wall() { local t0 t1; t0=$(date +%s.%N); "$@" > /dev/null; t1=$(date +%s.%N); echo "$t1 - $t0" | bc; }
for _ in $(seq "${1:-1}"); do
  rm -rf "$work/data" "$work/.databuild"
  printf 'out=$(echo "$DATABUILD_OUTPUTS" | tr -d %s)\nmkdir -p "$DATABUILD_OUTPUT_DIR/agg"\nwc -c < "$DATABUILD_DATA_DIR/gen/${out#agg/}" > "$DATABUILD_OUTPUT_DIR/$out"\n' "'[]\"'" > "$work/agg.sh"
  db() { "$bin" --graph "$work/databuild.toml" "$@"; }
  db build 'agg/{1..1000}' > /dev/null
  db env create dev > /dev/null
  sed -i 's/wc -c/wc -l/' "$work/agg.sh"
  db --json --env dev build 'agg/{1..1000}' > "$work/dev.json" 2> /dev/null
  python3 -c "import json,sys; c=json.load(open(sys.argv[1]))['counts']; assert c['reused']==1000, c" "$work/dev.json"
  data=$(du -sk "$work/data/gen" "$work/data/.databuild-env/dev/gen" | awk 'NR==2 {print $1 * 1024}')
  log=$(stat -c %s "$work/.databuild/env/dev/events.db")
  promote=$(wall db env promote dev)
  rollback=$(wall db env rollback)
  echo "$promote $rollback $((data / 1000)) $((log / 2000))" >> "$work/runs"
  echo "promote $promote s, rollback $rollback s, $((data / 1000)) B/partition of data, $((log / 2000)) B/run of log"
done
python3 - "$work/runs" "bench/env.sh $*" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record, spread
runs = [line.split() for line in open(sys.argv[1])]
command = sys.argv[2].strip()
n = f"{len(runs)} run{'s' if len(runs) > 1 else ''}"
col = lambda i, f: spread([f(r[i]) for r in runs])
record("env.promote.1k", col(0, float), "s", "<= 1",
       "`env promote` of 1,000 partitions (one append, then a swap each): wall", detail=n, command=command)
record("env.rollback.1k", col(1, float), "s", "<= 1",
       "`env rollback` of that promotion: wall", detail=n, command=command)
record("env.reuse.data_bytes", col(2, int), "bytes", "<= 1024",
       "a partition a build in an environment reused (hard links): its disk in the environment's data dir",
       detail=n, command=command)
record("env.reuse.log_bytes", col(3, int), "bytes", None,
       "a run recorded in an environment's log (reused or run alike: 7 events and their projections)",
       detail=n, command=command)
PY
