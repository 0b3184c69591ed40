"""The larger of the day's and the previous day's totals.

As a config (`best.py config REF...`) it says which totals each output reads; as the job it
reads them, and asks for any that is missing instead of failing.
"""
import datetime
import json
import sys

from databuild import job


def choose(ref: str) -> dict:
    day = datetime.date.fromisoformat(ref.rsplit("=", 1)[1])
    days = [day - datetime.timedelta(days=1), day]
    return {"inputs": [f"totals/date={d.isoformat()}" for d in days], "args": [day.isoformat()]}


if sys.argv[1:2] == ["config"]:
    job.configs(choose, argv=sys.argv[2:])
else:
    absent = [ref for ref in job.inputs if not job.path(ref).exists()]
    if absent:
        job.missing(absent)
    totals = [json.loads(job.path(ref).read_text())["total"] for ref in job.inputs]
    job.write_json({"date": sys.argv[1], "best": max(totals)})
