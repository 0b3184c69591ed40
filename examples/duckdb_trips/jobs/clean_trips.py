"""The day's trips that make sense: refunds (negative fares) and trips that went nowhere go."""
from common import connect, report_rows, write_parquet
from databuild import job

(raw,) = job.inputs
con = connect()
path = job.path(raw)
rows = write_parquet(
    con,
    f"SELECT * FROM read_parquet('{path}') WHERE fare >= 0 AND distance_km > 0",
    job.output,
)
dropped = con.execute(f"SELECT count(*) FROM read_parquet('{path}')").fetchone()[0] - rows
report_rows(job.output, rows, dropped=dropped)
