#!/usr/bin/env bash
# The peers workload (bench/peers/generate.py: 5 levels, DATES days x CATEGORIES categories) built
# by `databuild build --parallel 2` on SQLite and on a PostgreSQL log, then its no-op rerun, each
# scenario RUNS times alternating the backends; prints every time and the medians (recorded:
# postgres.<size>.build and .noop, PostgreSQL's median over SQLite's; 120 10 is 2.7k, 1095 10 24k).
#   bench/postgres.sh URL [RUNS=3] [DATES=120] [CATEGORIES=10]
# URL is a server's admin URL (postgres://user@host:port/db): each run gets a fresh database on it.
# DATABUILD_BIN picks the binary (default: the release build, built here).
set -euo pipefail
cd "$(dirname "$0")/.."
url=$1
runs=${2:-3}
dates=${3:-120}
cats=${4:-10}
if [ -z "${DATABUILD_BIN:-}" ]; then
  cargo build --release -q -p databuild
  DATABUILD_BIN="${CARGO_TARGET_DIR:-$PWD/target}/release/databuild"
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
python3 bench/peers/generate.py "$work/src" "$dates" "$cats" >&2
targets=$(cat "$work/src/targets.txt")
base=${url%/*}

seconds() { awk -v n="$1" 'BEGIN{printf "%.3f", n/1e9}'; }
# timed NAME CMD...: runs CMD in the workload's copy, appends "NAME seconds" to the results.
timed() {
  local name=$1; shift
  sync
  local start; start=$(date +%s%N)
  (cd "$work/w" && "$@" >/dev/null 2>"$work/err") || { cat "$work/err" >&2; exit 1; }
  echo "$name $(seconds $(( $(date +%s%N) - start )))" | tee -a "$work/results"
}

for i in $(seq "$runs"); do
  for backend in sqlite postgres; do
    rm -rf "$work/w" && cp -r "$work/src" "$work/w"
    if [ "$backend" = postgres ]; then
      db="bench_$(date +%s%N)"
      psql -q "$url" -c "CREATE DATABASE $db"
      log=(--event-log "$base/$db")
    else
      log=()  # the graph's default, sqlite:.databuild/events.db
    fi
    timed "$backend-build" "$DATABUILD_BIN" "${log[@]}" build --parallel 2 $targets
    timed "$backend-noop" "$DATABUILD_BIN" "${log[@]}" build --parallel 2 $targets
    [ "$backend" = postgres ] && psql -q "$url" -c "DROP DATABASE $db"
  done
done

echo "medians of $runs:"
for s in sqlite-build postgres-build sqlite-noop postgres-noop; do
  printf '%s %s\n' "$s" "$(awk -v s="$s" '$1 == s {print $2}' "$work/results" | sort -n | awk '{a[NR]=$1} END{print a[int((NR+1)/2)]}')"
done | tee "$work/medians"
python3 - "$work/medians" "${dates}x$cats" "$runs" "bench/postgres.sh URL ${*:2}" "$(psql -Atq "$url" -c 'SHOW fsync')" <<'PY'
import sys
sys.path.insert(0, "bench")
from record import record
m = {name: float(v) for name, v in (line.split() for line in open(sys.argv[1]))}
size = {"120x10": "2.7k", "1095x10": "24k"}.get(sys.argv[2], sys.argv[2])
goals = {("2.7k", "build"): "<= 1.2", ("2.7k", "noop"): "<= 2", ("24k", "noop"): "<= 2"}
for scenario, what in (("build", "a build with `--parallel 2`"), ("noop", "the no-op rerun")):
    record(f"postgres.{size}.{scenario}", round(m[f"postgres-{scenario}"] / m[f"sqlite-{scenario}"], 2), "×",
           goals.get((size, scenario)), f"{size} jobs, {what} on a PostgreSQL log, over SQLite's",
           detail=f"PostgreSQL {m[f'postgres-{scenario}']:.3f} s, medians of {sys.argv[3]}, fsync {sys.argv[5]}",
           peer=f"SQLite {m[f'sqlite-{scenario}']:.3f} s", command=sys.argv[4].strip())
PY
