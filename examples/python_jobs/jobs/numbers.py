"""A day's numbers: as many as the day of the month, one per line."""
from databuild import job

day = job.fields["date"]  # a datetime.date
with job.open_output() as out:  # the partition appears whole, or not at all
    for n in range(1, day.day + 1):
        out.write(f"{n}\n")
job.report({"rows": day.day})
