#!/usr/bin/env python3
"""How busy a build keeps its slots: from the kernel's process events, when each job ran.

    cd WORKLOAD && perf record -q -a -o sched.perf \
        -e sched:sched_process_exec -e sched:sched_process_exit -e sched:sched_process_fork \
        -- COMMAND (make -s -j2, or databuild build --parallel 2 ...)
    perf script -i sched.perf -F comm,pid,tid,time,event,trace > sched.txt
    bench/peers/timeline.py sched.txt [SLOTS]

A job is an `sh` the build's process started (directly, or through a short-lived child).
Prints the time to the first job, from the last job to the build's exit, the slot time left idle
between the first job's start and the last one's end, and how long a slot waits from one job's
exit to the next job's start.
"""
import bisect
import re
import sys

path = sys.argv[1]
slots = int(sys.argv[2]) if len(sys.argv) > 2 else 2
event = re.compile(r"\s*(\S+)\s+(\d+)/(\d+)\s+([\d.]+): (\S+): (.*)")
build = start = end = None
children = set()
jobs = {}
for line in open(path):
    m = event.match(line)
    if not m:
        continue
    _, pid, _, t, name, rest = m.groups()
    pid, t = int(pid), float(t)
    if name.endswith("process_exec") and build is None:
        build, start = pid, t
    elif name.endswith("process_fork") and pid == build:
        children.add(int(re.search(r"child_pid=(\d+)", rest).group(1)))
    elif name.endswith("process_exec") and pid in children and "filename=/usr/bin/sh" in rest:
        jobs[pid] = [t, None]
    elif name.endswith("process_exit") and "group_dead=true" in rest:
        if pid in jobs:
            jobs[pid][1] = t
        elif pid == build:
            end = t
# DataBuild's watchdog is an `sh` too, alive for the whole build: not a job.
runs = sorted(j for j in jobs.values() if j[1] is not None and j[1] - j[0] < 1.0)
first, last = runs[0][0], max(e for _, e in runs)
points = sorted([(s, 1) for s, _ in runs] + [(e, -1) for _, e in runs])
running, at, idle = 0, first, 0.0
for t, change in points:
    idle += max(0, slots - running) * (t - at)
    running, at = running + change, t
span = last - first
starts = sorted(s for s, _ in runs)
gaps = sorted(starts[i] - e for _, e in runs if (i := bisect.bisect_left(starts, e)) < len(starts))
durations = sorted(e - s for s, e in runs)
pct = lambda xs, q: xs[int(len(xs) * q)] * 1e3
print(f"{len(runs)} jobs; first job {1e3 * (first - start):.0f} ms after the start; "
      f"exit {1e3 * (end - last):.0f} ms after the last job" if end else "")
print(f"span {span:.2f} s; slots idle {100 * idle / (slots * span):.0f}% of it ({idle:.2f} slot-s)")
print(f"job: median {pct(durations, .5):.2f} ms, p90 {pct(durations, .9):.2f} ms")
print(f"a job's exit to the next start: median {pct(gaps, .5):.2f} ms, p90 {pct(gaps, .9):.2f} ms")
