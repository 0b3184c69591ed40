#!/usr/bin/env bash
# DataBuild next to GNU make, Snakemake and Luigi on one workload (generate.py), on this machine:
#   bench/peers/run.sh [runs=3] [big=1]
# Scenarios: plan only (dry run), full build from scratch with 2 workers, no-op rerun. Each
# scenario runs for every system in turn, `runs` times, in a fresh copy of the workload; the table
# of medians (and the ratio to the fastest peer) goes to bench/peers/results.md, and each
# scenario's ratio to make is recorded (peers.<jobs>.<scenario>, see bench/record.py). Peers are installed
# for the benchmark only, in bench/.venv. Snakemake and Luigi run once per size (they take minutes);
# at ~24k jobs only Snakemake's dry run is measured. A command over PEER_LIMIT seconds (default 600)
# counts as not finished.
set -euo pipefail
cd "$(dirname "$0")/../.."
runs=${1:-3}
big=${2:-1}
limit=${PEER_LIMIT:-600}
[ -x bench/.venv/bin/snakemake ] || { python3 -m venv bench/.venv && bench/.venv/bin/pip install -q snakemake luigi; }
cargo build --release -q -p databuild
db="$PWD/target/release/databuild"
sm="$PWD/bench/.venv/bin/snakemake"
py="$PWD/bench/.venv/bin/python"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
results="$work/results.tsv"

# time_cmd SIZE SYSTEM SCENARIO DIR CMD...: appends seconds (or "timeout") to the results.
time_cmd() {
  local size=$1 system=$2 scenario=$3 dir=$4; shift 4
  local start end
  sync  # the previous command's write-back would otherwise land on this one
  start=$(date +%s%N)
  if (cd "$dir" && timeout "$limit" "$@" >/dev/null 2>&1); then
    end=$(date +%s%N)
    printf '%s\t%s\t%s\t%s\n' "$size" "$system" "$scenario" "$(awk -v n=$((end - start)) 'BEGIN{printf "%.3f", n/1e9}')" >> "$results"
  else
    printf '%s\t%s\t%s\t%s\n' "$size" "$system" "$scenario" "failed-or-timeout" >> "$results"
  fi
}

# fresh SIZE: a new copy of the workload, "$w". Copies are removed only at
# the end: on ext4 without a journal (this project's VMs), creating a file skips every inode freed
# in the last minute (`recently_deleted`), so deleting one system's thousands of outputs right
# before the next system's build made that build pay for them.
copies=0
fresh() {
  copies=$((copies + 1))
  w="$work/copy-$copies"
  cp -r "$work/$1" "$w"
}

sizes="120x10"
[ "$big" = 1 ] && sizes="$sizes 1095x10"
for size in $sizes; do
  python3 bench/peers/generate.py "$work/$size" "${size%x*}" "${size#*x}" >&2
  targets=$(cat "$work/$size/targets.txt")
  for i in $(seq "$runs"); do
    for system in databuild make snakemake luigi; do
      # Snakemake and Luigi take minutes: one run each, and at ~24k jobs only Snakemake's dry run.
      if { [ "$system" = snakemake ] || [ "$system" = luigi ]; } && [ "$i" -gt 1 ]; then continue; fi
      if [ "$size" != 120x10 ] && [ "$system" = luigi ]; then continue; fi
      fresh "$size"
      case $system in
        databuild)
          time_cmd "$size" databuild plan "$w" "$db" analyze --limit 1 $targets
          rm -rf "$w/.databuild"
          time_cmd "$size" databuild build "$w" "$db" build --parallel 2 $targets
          time_cmd "$size" databuild noop "$w" "$db" build --parallel 2 $targets ;;
        make)
          time_cmd "$size" make plan "$w" make -n -j2
          time_cmd "$size" make build "$w" make -j2
          time_cmd "$size" make noop "$w" make -j2 ;;
        snakemake)
          time_cmd "$size" snakemake plan "$w" "$sm" -n --cores 2 --quiet
          if [ "$size" = 120x10 ]; then
            time_cmd "$size" snakemake build "$w" "$sm" --cores 2 --quiet
            time_cmd "$size" snakemake noop "$w" "$sm" --cores 2 --quiet
          fi ;;
        luigi)
          time_cmd "$size" luigi build "$w" "$py" -m luigi --module luigi_tasks All --workers 2 --local-scheduler
          time_cmd "$size" luigi noop "$w" "$py" -m luigi --module luigi_tasks All --workers 2 --local-scheduler ;;
      esac
    done
  done
done

python3 - "$results" "$db" "$sm" "${PEER_LIMIT:+PEER_LIMIT=$PEER_LIMIT }bench/peers/run.sh $*" > bench/peers/results.md <<'PY'
import statistics, subprocess, sys, platform
sys.path.insert(0, "bench")
from record import record
rows = [l.rstrip("\n").split("\t") for l in open(sys.argv[1])]
def version(cmd):
    try:
        return subprocess.run(cmd, capture_output=True, text=True).stdout.strip().splitlines()[0]
    except Exception:
        return "?"
cpu = next((l.split(":", 1)[1].strip() for l in open("/proc/cpuinfo") if l.startswith("model name")), "?")
print(f"Machine: {cpu}, {subprocess.run(['nproc'], capture_output=True, text=True).stdout.strip()} cores, {platform.system()} {platform.release()}.")
print(f"Versions: {version([sys.argv[2], '--version'])}; {version(['make', '--version'])}; snakemake {version([sys.argv[3], '--version'])}; "
      f"luigi {version([sys.argv[3].replace('snakemake', 'python'), '-c', 'import luigi; print(luigi.__version__)'])}.\n")
print("| jobs | scenario | databuild | make | snakemake | luigi | databuild / fastest peer |")
print("|---|---|---:|---:|---:|---:|---:|")
jobs = {"120x10": "2,690", "1095x10": "24,555"}
for size in ["120x10", "1095x10"]:
    for scenario in ["plan", "build", "noop"]:
        cells, values = [], {}
        for system in ["databuild", "make", "snakemake", "luigi"]:
            times = [r[3] for r in rows if r[0] == size and r[1] == system and r[2] == scenario]
            numbers = [float(t) for t in times if t != "failed-or-timeout"]
            if numbers:
                values[system] = statistics.median(numbers)
                cells.append(f"{values[system]:.2f} s")
            elif times:
                cells.append("did not finish")
            else:
                cells.append("—")
        if not any(c != "—" for c in cells):
            continue
        peers = [v for k, v in values.items() if k != "databuild"]
        ratio = f"{values['databuild'] / min(peers):.2f}×" if "databuild" in values and peers else "—"
        print(f"| {jobs[size]} | {scenario} | " + " | ".join(cells) + f" | {ratio} |")
        if "databuild" in values and "make" in values:
            label = {"120x10": "2.7k", "1095x10": "24k"}[size]
            goal = {"plan": "<= 1.5", "build": "<= 1.3" if label == "2.7k" else "<= 1.5",
                    "noop": "<= 1.5" if label == "24k" else None}[scenario]
            what = {"plan": "plan (`analyze` / `make -n`)", "build": "build with 2 workers",
                    "noop": "no-op rerun"}[scenario]
            others = ", ".join(f"{s.capitalize() if s != 'make' else s} {values[s]:.2f} s"
                               for s in ["make", "snakemake", "luigi"] if s in values)
            record(f"peers.{label}.{scenario}", round(values["databuild"] / values["make"], 2), "×", goal,
                   f"{jobs[size]} jobs: {what}, over make's", detail=f"{values['databuild']:.2f} s",
                   peer=others, command=sys.argv[4].strip())
PY
cat bench/peers/results.md
