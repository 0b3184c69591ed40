#!/usr/bin/env bash
# Builds N no-op jobs (each a real process) with `databuild build`, and runs the same N processes
# with xargs as the floor; reports the overhead per job beyond process start (recorded:
# build.local.overhead; with EXECUTOR=slurm, build.slurm.per_job).
# Usage: [DATABUILD_BIN=PATH] bench/build.sh [N=10000] [PARALLEL=2]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-10000}
parallel=${2:-2}
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
executor=${EXECUTOR:-local}   # EXECUTOR=slurm (with SLURM_CONF set) runs the jobs on Slurm
cat > "$work/databuild.toml" <<TOML
[graph]
name = "noop_bench"
executor = "$executor"
[[job]]
name = "noop"
outputs = ["n/{i:int}"]
command = ["sh", "-c", "touch \"\$DATABUILD_DATA_DIR/n/\$DATABUILD_FIELD_I\""]
TOML
mkdir -p "$work/data/n" "$work/floor/n"
start=$(date +%s%N)
seq 1 "$n" | DATABUILD_DATA_DIR="$work/floor" xargs -P "$parallel" -I{} env DATABUILD_FIELD_I={} sh -c 'touch "$DATABUILD_DATA_DIR/n/$DATABUILD_FIELD_I"'
floor=$(( $(date +%s%N) - start ))
start=$(date +%s%N)
"$bin" --graph "$work/databuild.toml" build --parallel "$parallel" "n/{1..$n}" > "$work/out.txt" 2>/dev/null
total=$(( $(date +%s%N) - start ))
tail -1 "$work/out.txt"
awk -v n="$n" -v p="$parallel" -v f="$floor" -v t="$total" 'BEGIN {
  printf "executor='"$executor"' jobs=%d parallel=%d  floor (xargs): %.2f s  databuild: %.2f s  overhead per job: %.3f ms (wall, at parallel %d)\n",
         n, p, f/1e9, t/1e9, (t-f)/1e6/n, p }'
command="bench/build.sh $*"
[ "$executor" = local ] || command="EXECUTOR=$executor $command"
if [ "$executor" = local ]; then
  python3 bench/record.py build.local.overhead "$(awk -v n="$n" -v f="$floor" -v t="$total" 'BEGIN{printf "%.3f", (t-f)/1e6/n}')" ms \
    --goal "<= 2" --what "overhead per job beyond starting its process" \
    --detail "$n jobs at --parallel $parallel: $(awk -v t="$total" 'BEGIN{printf "%.2f", t/1e9}') s" \
    --peer "\`xargs -P $parallel\`: $(awk -v f="$floor" 'BEGIN{printf "%.2f", f/1e9}') s" --command "$command"
else
  python3 bench/record.py "build.$executor.per_job" "$(awk -v n="$n" -v t="$total" 'BEGIN{printf "%.2f", t/1e9/n}')" s \
    --what "wall time per job, each a $executor job" \
    --detail "$n jobs at --parallel $parallel: $(awk -v t="$total" 'BEGIN{printf "%.1f", t/1e9}') s" --command "$command"
fi
