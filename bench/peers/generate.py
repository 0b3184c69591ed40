#!/usr/bin/env python3
"""Writes one workload for DataBuild, GNU make, Snakemake and Luigi into a folder.

    generate.py DIR DATES CATEGORIES

raw/date=D (external, created here) -> reviews/date=D -> categorized/category=C/date=D
-> summary/category=C/date=D (reads categorized and the day's reviews)
-> weekly/category=C/week=W (7 summaries). Every job is a real `sh` process writing a tiny file.
"""
import datetime
import os
import sys
from pathlib import Path

out = Path(sys.argv[1])
dates_n, cats_n = int(sys.argv[2]), int(sys.argv[3])
start = datetime.date(2020, 1, 1)
dates = [(start + datetime.timedelta(days=i)).isoformat() for i in range(dates_n)]
cats = [f"c{i}" for i in range(cats_n)]
weeks = [dates[i] for i in range(0, dates_n - 6, 7)]
out.mkdir(parents=True, exist_ok=True)

for d in dates:
    p = out / "data" / "raw" / f"date={d}"
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text("raw\n")

# The same work everywhere: one `sh` process that makes the folder and writes the file.
(out / "job.sh").write_text('mkdir -p "${1%/*}" && echo x > "$1"\n')
(out / "job_db.sh").write_text(
    'o=${DATABUILD_OUTPUTS#\\[\\"}; o=${o%\\"\\]}; p="$DATABUILD_DATA_DIR/$o"\n'
    'mkdir -p "${p%/*}" && echo x > "$p"\n'
)

# DataBuild
(out / "databuild.toml").write_text(f"""[graph]
name = "peer_bench"
[graph.domains]
category = {cats!r}
[[dataset]]
name = "raw"
pattern = "raw/date={{date:date}}"
[[job]]
name = "reviews"
outputs = ["reviews/date={{date:date}}"]
inputs = ["raw/date={{date}}"]
command = ["sh", "job_db.sh"]
[[job]]
name = "categorized"
outputs = ["categorized/category={{category}}/date={{date:date}}"]
inputs = ["reviews/date={{date}}"]
command = ["sh", "job_db.sh"]
[[job]]
name = "summary"
outputs = ["summary/category={{category}}/date={{date:date}}"]
inputs = ["categorized/category={{category}}/date={{date}}", "reviews/date={{date}}"]
command = ["sh", "job_db.sh"]
[[job]]
name = "weekly"
outputs = ["weekly/category={{category}}/week={{week:date}}"]
inputs = ["summary/category={{category}}/date={{week..week+6d}}"]
command = ["sh", "job_db.sh"]
""".replace("'", '"'))
targets = [f"weekly/category={c}/week={w}" for c in cats for w in weeks]
(out / "targets.txt").write_text("\n".join(targets) + "\n")

# GNU make: explicit rules, one recipe (one sh process) per target.

rules = ["all: " + " ".join(f"data/{t}" for t in targets), ""]
for d in dates:
    rules += [f"data/reviews/date={d}: data/raw/date={d}", "\t@sh job.sh $@", ""]
    for c in cats:
        rules += [f"data/categorized/category={c}/date={d}: data/reviews/date={d}", "\t@sh job.sh $@", ""]
        rules += [f"data/summary/category={c}/date={d}: data/categorized/category={c}/date={d} data/reviews/date={d}", "\t@sh job.sh $@", ""]
for c in cats:
    for w in weeks:
        i = dates.index(w)
        deps = " ".join(f"data/summary/category={c}/date={d}" for d in dates[i:i + 7])
        rules += [f"data/weekly/category={c}/week={w}: {deps}", "\t@sh job.sh $@", ""]
# `=` in a target would read as a variable assignment: spell it through a variable.
(out / "Makefile").write_text("EQ := =\n" + "\n".join(rules).replace("=", "$(EQ)"))

# Snakemake: wildcard rules.
(out / "Snakefile").write_text(f'''import datetime
DATES = {dates!r}
CATS = {cats!r}
WEEKS = {weeks!r}
def week_days(w):
    d = datetime.date.fromisoformat(w)
    return [(d + datetime.timedelta(days=i)).isoformat() for i in range(7)]
rule all:
    input: expand("data/weekly/category={{c}}/week={{w}}", c=CATS, w=WEEKS)
rule reviews:
    input: "data/raw/date={{d}}"
    output: "data/reviews/date={{d}}"
    shell: "sh job.sh {{output}}"
rule categorized:
    input: "data/reviews/date={{d}}"
    output: "data/categorized/category={{c}}/date={{d}}"
    shell: "sh job.sh {{output}}"
rule summary:
    input: "data/categorized/category={{c}}/date={{d}}", "data/reviews/date={{d}}"
    output: "data/summary/category={{c}}/date={{d}}"
    shell: "sh job.sh {{output}}"
rule weekly:
    input: lambda wc: [f"data/summary/category={{wc.c}}/date={{d}}" for d in week_days(wc.w)]
    output: "data/weekly/category={{c}}/week={{w}}"
    shell: "sh job.sh {{output}}"
''')

# Luigi: one task class per stage, each run() a real process.
(out / "luigi_tasks.py").write_text(f'''import datetime, subprocess
import luigi
CATS = {cats!r}
WEEKS = {weeks!r}
def run(path):
    subprocess.run(["sh", "job.sh", path], check=True)
class Raw(luigi.ExternalTask):
    d = luigi.Parameter()
    def output(self): return luigi.LocalTarget(f"data/raw/date={{self.d}}")
class Reviews(luigi.Task):
    d = luigi.Parameter()
    def requires(self): return Raw(self.d)
    def output(self): return luigi.LocalTarget(f"data/reviews/date={{self.d}}")
    def run(self): run(self.output().path)
class Categorized(luigi.Task):
    c = luigi.Parameter(); d = luigi.Parameter()
    def requires(self): return Reviews(self.d)
    def output(self): return luigi.LocalTarget(f"data/categorized/category={{self.c}}/date={{self.d}}")
    def run(self): run(self.output().path)
class Summary(luigi.Task):
    c = luigi.Parameter(); d = luigi.Parameter()
    def requires(self): return [Categorized(self.c, self.d), Reviews(self.d)]
    def output(self): return luigi.LocalTarget(f"data/summary/category={{self.c}}/date={{self.d}}")
    def run(self): run(self.output().path)
class Weekly(luigi.Task):
    c = luigi.Parameter(); w = luigi.Parameter()
    def requires(self):
        d = datetime.date.fromisoformat(self.w)
        return [Summary(self.c, (d + datetime.timedelta(days=i)).isoformat()) for i in range(7)]
    def output(self): return luigi.LocalTarget(f"data/weekly/category={{self.c}}/week={{self.w}}")
    def run(self): run(self.output().path)
class All(luigi.WrapperTask):
    def requires(self): return [Weekly(c, w) for c in CATS for w in WEEKS]
''')
jobs = dates_n + 2 * dates_n * cats_n + len(targets)
print(f"{out}: {dates_n} dates x {cats_n} categories = {jobs} jobs, {len(targets)} targets")
