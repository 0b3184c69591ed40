#!/usr/bin/env bash
# What hashing job outputs costs a build (a job output's data version is its content's hash, read
# once after the run). N jobs each write M MiB in place, built with `databuild build`, beside the
# same processes under xargs (the floor); then the same with jobs that write nothing. The extra
# overhead of the large outputs over the empty ones, per MiB, is DataBuild's hashing; recorded as
# its throughput (build.local.hash, MiB/s) and its share of the large build's wall time
# (build.local.hash_share, %), beside `sha256sum` of the same outputs.
# Usage: [DATABUILD_BIN=PATH] bench/hash.sh [N=50] [M=8] [PARALLEL=2]
set -euo pipefail
cd "$(dirname "$0")/.."
n=${1:-50}
mib=${2:-8}
parallel=${3:-2}
[ -n "${DATABUILD_BIN:-}" ] || cargo build --release -q -p databuild
bin="${DATABUILD_BIN:-$PWD/target/release/databuild}"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

# One sitting: the floor and DataBuild of `size` MiB outputs; prints "floor_ns build_ns".
sitting() {
  local size=$1 dir="$work/$1"
  mkdir -p "$dir/data/n" "$dir/floor/n"
  local write="head -c $((size * 1048576)) /dev/zero > \"\$DATABUILD_DATA_DIR/n/\$DATABUILD_FIELD_I\""
  cat > "$dir/databuild.toml" <<TOML
[graph]
name = "hash_bench"
[[job]]
name = "write"
outputs = ["n/{i:int}"]
command = ["sh", "-c", "head -c $((size * 1048576)) /dev/zero > \\"\$DATABUILD_DATA_DIR/n/\$DATABUILD_FIELD_I\\""]
TOML
  local start floor total
  start=$(date +%s%N)
  seq 1 "$n" | DATABUILD_DATA_DIR="$dir/floor" xargs -P "$parallel" -I{} env DATABUILD_FIELD_I={} sh -c "$write"
  floor=$(( $(date +%s%N) - start ))
  rm -rf "$dir/floor"
  start=$(date +%s%N)
  "$bin" --graph "$dir/databuild.toml" build --parallel "$parallel" "n/{1..$n}" > "$dir/out.txt" 2>/dev/null
  total=$(( $(date +%s%N) - start ))
  # The peer: `sha256sum` of the same outputs (from the page cache, as DataBuild read them).
  start=$(date +%s%N)
  find "$dir/data/n" -type f -print0 | xargs -0 -r sha256sum > /dev/null
  local peer=$(( $(date +%s%N) - start ))
  rm -rf "$dir/data"
  echo "$floor $total $peer"
}

read -r floor0 total0 _ < <(sitting 0)
read -r floorm totalm peer < <(sitting "$mib")
awk -v n="$n" -v m="$mib" -v f0="$floor0" -v t0="$total0" -v fm="$floorm" -v tm="$totalm" 'BEGIN {
  extra = (tm - fm) - (t0 - f0); if (extra < 1) extra = 1
  printf "jobs=%d of %d MiB  empty: floor %.2f s, databuild %.2f s  large: floor %.2f s, databuild %.2f s\n", n, m, f0/1e9, t0/1e9, fm/1e9, tm/1e9
  printf "hashing: %.0f MiB/s, %.1f%% of the large build\n", n*m/(extra/1e9), 100*extra/tm
}'
throughput=$(awk -v n="$n" -v m="$mib" -v f0="$floor0" -v t0="$total0" -v fm="$floorm" -v tm="$totalm" 'BEGIN {
  extra = (tm - fm) - (t0 - f0); if (extra < 1) extra = 1; printf "%.0f", n*m/(extra/1e9) }')
share=$(awk -v f0="$floor0" -v t0="$total0" -v fm="$floorm" -v tm="$totalm" 'BEGIN {
  extra = (tm - fm) - (t0 - f0); if (extra < 0) extra = 0; printf "%.1f", 100*extra/tm }')
detail="$n jobs of $mib MiB at --parallel $parallel: $(awk -v t="$totalm" 'BEGIN{printf "%.2f", t/1e9}') s (empty outputs: $(awk -v t="$total0" 'BEGIN{printf "%.2f", t/1e9}') s)"
python3 bench/record.py build.local.hash "$throughput" "MiB/s" \
  --what "hashing job outputs (their data versions), throughput" --detail "$detail" \
  --peer "\`sha256sum\` of the same outputs: $(awk -v n="$n" -v m="$mib" -v s="$peer" 'BEGIN{printf "%.0f", n*m/(s/1e9)}') MiB/s; \`xargs -P $parallel\` of the jobs: $(awk -v f="$floorm" 'BEGIN{printf "%.2f", f/1e9}') s" --command "bench/hash.sh $*"
python3 bench/record.py build.local.hash_share "$share" "%" \
  --what "hashing's share of a build whose jobs only write $mib MiB each (the worst case: its jobs do nothing else)" --detail "$detail" \
  --command "bench/hash.sh $*"
