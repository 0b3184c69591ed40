#!/usr/bin/env python3
"""Writes one workload of a given shape for DataBuild and GNU make into a folder.

    generate.py DIR SHAPE JOBS

Shapes (every job one `sh` process writing a tiny file, as in bench/peers):
- `dates`: many dates x 3 categories (bench/peers' graph: reviews -> categorized -> summary ->
  weekly), about JOBS jobs;
- `categories`: 14 dates x many categories, the same graph, about JOBS jobs;
- `deep`: a ladder 300 levels deep, JOBS/300 wide: job `l{i}` reads `l{i-1}` of the same `p`;
- `fanin`: JOBS-1 daily leaves (from raw data), then one job that reads all of them.
"""
import datetime
import subprocess
import sys
from pathlib import Path

out, shape, jobs_n = Path(sys.argv[1]), sys.argv[2], int(sys.argv[3])
here = Path(__file__).resolve().parent
start = datetime.date(2020, 1, 1)


def day(i):
    return (start + datetime.timedelta(days=i)).isoformat()


def grid(dates_n, cats_n):
    subprocess.run(
        [sys.executable, str(here.parent / "peers" / "generate.py"), str(out), str(dates_n), str(cats_n)],
        check=True, stdout=subprocess.DEVNULL,
    )


def common():
    out.mkdir(parents=True, exist_ok=True)
    (out / "job.sh").write_text('mkdir -p "${1%/*}" && echo x > "$1"\n')
    (out / "job_db.sh").write_text(
        'o=${DATABUILD_OUTPUTS#\\[\\"}; o=${o%\\"\\]}; p="$DATABUILD_DATA_DIR/$o"\n'
        'mkdir -p "${p%/*}" && echo x > "$p"\n'
    )


def write(toml, rules, targets):
    (out / "databuild.toml").write_text(toml)
    (out / "Makefile").write_text("EQ := =\n" + "\n".join(rules).replace("=", "$(EQ)"))
    (out / "targets.txt").write_text("\n".join(targets) + "\n")


if shape == "dates":
    # jobs = D + 2*3*D + 3*(D/7) ~ 7.4 D
    grid(round(jobs_n / 7.43), 3)
elif shape == "categories":
    # jobs = 14 + 2*14*C + 2*C = 14 + 30 C
    grid(14, round((jobs_n - 14) / 30))
elif shape == "deep":
    common()
    levels = 300
    width = max(1, jobs_n // levels)
    toml = ['[graph]', 'name = "deep"']
    rules = []
    for i in range(levels):
        inputs = f'inputs = ["l{i - 1}/p={{p}}"]\n' if i else ""
        toml.append(f'[[job]]\nname = "l{i}"\noutputs = ["l{i}/p={{p:int}}"]\n{inputs}command = ["sh", "job_db.sh"]')
        for p in range(width):
            dep = f" data/l{i - 1}/p={p}" if i else ""
            rules += [f"data/l{i}/p={p}:{dep}", "\t@sh job.sh $@", ""]
    targets = [f"l{levels - 1}/p={p}" for p in range(width)]
    rules = ["all: " + " ".join(f"data/{t}" for t in targets), ""] + rules
    write("\n".join(toml) + "\n", rules, targets)
elif shape == "fanin":
    common()
    leaves = jobs_n - 1
    last = day(leaves - 1)
    for i in range(leaves):
        p = out / "data" / "raw" / f"date={day(i)}"
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("raw\n")
    toml = f"""[graph]
name = "fanin"
[[dataset]]
name = "raw"
pattern = "raw/date={{date:date}}"
[[job]]
name = "leaf"
outputs = ["leaf/date={{date:date}}"]
inputs = ["raw/date={{date}}"]
command = ["sh", "job_db.sh"]
[[job]]
name = "total"
outputs = ["total/date={{date:date}}"]
inputs = ["leaf/date={{date-{leaves - 1}d..date}}"]
command = ["sh", "job_db.sh"]
"""
    rules = [f"all: data/total/date={last}", ""]
    for i in range(leaves):
        rules += [f"data/leaf/date={day(i)}: data/raw/date={day(i)}", "\t@sh job.sh $@", ""]
    rules += [f"data/total/date={last}: " + " ".join(f"data/leaf/date={day(i)}" for i in range(leaves)),
              "\t@sh job.sh $@", ""]
    write(toml, rules, [f"total/date={last}"])
else:
    sys.exit(f"unknown shape `{shape}`: dates, categories, deep or fanin")
print(f"{out}: {shape}")
