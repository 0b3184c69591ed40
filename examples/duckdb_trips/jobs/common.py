"""What the jobs share: a DuckDB connection, Parquet written atomically, rows reported."""
import os
import tempfile

import duckdb

from databuild import job


def connect():
    """An in-memory DuckDB: the data lives in the Parquet partitions, not in a database."""
    return duckdb.connect(config={"threads": 1})


def write_parquet(con, sql, ref):
    """Writes the rows of `sql` as the Parquet partition `ref`, atomically (a temp file renamed
    into place), and returns how many rows it wrote."""
    path = job.output_path(ref)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(fd)
    try:
        con.execute(f"COPY ({sql}) TO '{tmp}' (FORMAT parquet)")
        rows = con.execute(f"SELECT count(*) FROM read_parquet('{tmp}')").fetchone()[0]
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return rows


def report_rows(ref, rows, **more):
    """Reports the rows written to `ref` as the run's metrics (`runs ID` shows them, `databuild
    metrics` lists them, an anomaly check judges them, OpenLineage sends them as
    `outputStatistics`), with `more` beside it."""
    job.report_metric(ref, "rows", rows)
    for name, value in more.items():
        job.report_metric(ref, name, value)
