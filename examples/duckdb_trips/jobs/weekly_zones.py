"""Trips, revenue and tips by pickup zone over the week's 7 days of clean trips."""
from common import connect, report_rows, write_parquet
from databuild import job

files = ", ".join(f"'{job.path(r)}'" for r in job.inputs)
rows = write_parquet(
    connect(),
    f"""SELECT pickup_zone AS zone, count(*) AS trips, round(sum(fare), 2) AS revenue,
               round(sum(tip) / sum(fare), 4) AS tip_share
        FROM read_parquet([{files}]) GROUP BY pickup_zone ORDER BY pickup_zone""",
    job.output,
)
report_rows(job.output, rows, days=len(job.inputs))
