#!/usr/bin/env python3
"""Records one benchmark figure in bench/results/MEASURE.json and regenerates BENCHMARKS.md.

    bench/record.py MEASURE VALUE UNIT [--goal '<= 1.2'] [--what TEXT] [--peer TEXT]
                    [--detail TEXT] [--command TEXT] [--date YYYY-MM-DD] [--machine TEXT]

VALUE is a number or a range `LO..HI` (the spread of several runs). A goal is `<= X` or `>= X`
in the figure's unit. The date (UTC) and the machine (the CPU model of /proc/cpuinfo and the
cores this process may use) default to now and here. A measure's file is replaced whole: it
holds the latest figure, and git keeps the earlier ones.

BENCH_RESULTS=DIR records into DIR instead and leaves BENCHMARKS.md alone (for trying a
benchmark without changing the table). The bench scripts import `record` from here.
"""

import argparse
import datetime
import json
import os
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DEFAULT_RESULTS = ROOT / "bench" / "results"
GOAL = re.compile(r"^(<=|>=)\s*(-?[0-9.]+)$")


def results_dir():
    return Path(os.environ.get("BENCH_RESULTS", DEFAULT_RESULTS))


def machine():
    model = "?"
    try:
        with open("/proc/cpuinfo") as cpuinfo:
            model = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), "?")
    except OSError:
        pass
    return f"{model}, {len(os.sched_getaffinity(0))} cores"


def parse_value(text):
    """A number, or a [low, high] pair from `LO..HI`."""
    if ".." in text:
        low, high = (float(part) for part in text.split("..", 1))
        return [min(low, high), max(low, high)]
    return float(text)


def spread(values):
    """One value, or the [low, high] range of several that differ."""
    low, high = min(values), max(values)
    return low if low == high else [low, high]


def label(count):
    """A count as the measures name it: 10000000 -> 10m, 300000 -> 300k."""
    count = int(count)
    for size, suffix in ((1_000_000, "m"), (1_000, "k")):
        if count >= size and count % size == 0:
            return f"{count // size}{suffix}"
    return str(count)


def record(measure, value, unit, goal=None, what=None, peer=None, detail=None, command=None, date=None, host=None):
    """Writes the measure's file (see the module's comment) and, in bench/results, the table."""
    if not re.fullmatch(r"[A-Za-z0-9_.-]+", measure):
        raise ValueError(f"a measure's name is letters, digits, '.', '_' and '-': {measure!r}")
    if goal is not None and not GOAL.match(goal):
        raise ValueError(f"a goal is '<= X' or '>= X': {goal!r}")
    if isinstance(value, str):
        value = parse_value(value)
    row = {
        "measure": measure,
        "what": what,
        "value": value,
        "unit": unit,
        "goal": goal,
        "detail": detail,
        "peer": peer,
        "command": command,
        "date": date or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "machine": host or machine(),
    }
    directory = results_dir()
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{measure}.json"
    path.write_text(json.dumps({k: v for k, v in row.items() if v is not None}, indent=2, ensure_ascii=False) + "\n")
    print(f"recorded {measure}: {value} {unit} in {path}", file=sys.stderr)
    if directory.resolve() == DEFAULT_RESULTS.resolve():
        sys.path.insert(0, str(ROOT / "bench"))
        import table

        table.write(DEFAULT_RESULTS, ROOT / "BENCHMARKS.md")


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("measure")
    parser.add_argument("value", help="a number, or LO..HI")
    parser.add_argument("unit", help="s, ms, MB, ×, ev/s, ...")
    parser.add_argument("--goal", help="'<= X' or '>= X', in the unit")
    parser.add_argument("--what", help="what is measured, in a few words")
    parser.add_argument("--peer", help="what the figure is compared with, and its figure")
    parser.add_argument("--detail", help="the figures behind the value (times, spread)")
    parser.add_argument("--command", help="the command that measured it")
    parser.add_argument("--date", help="YYYY-MM-DD (default: today, UTC)")
    parser.add_argument("--machine", help="default: this machine's CPU model and cores")
    args = parser.parse_args()
    try:
        record(args.measure, args.value, args.unit, args.goal, args.what, args.peer, args.detail,
               args.command, args.date, args.machine)
    except ValueError as e:
        sys.exit(f"bench/record.py: {e}")


if __name__ == "__main__":
    main()
