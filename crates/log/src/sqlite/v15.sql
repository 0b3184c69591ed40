-- Version 15: every run's measures and reported metrics, one row per (output ref, name), so "a
-- metric" is one thing everywhere: what DataBuild measured of a run that completed or failed
-- (`data.resources`: `wall_ms`, `cpu_user_ms`, ...; per output ref in `data.outputs`) and what
-- its job reported (`data.metrics`, by ref). Keyed for reading one job's metric per partition in
-- run order (run ids are UUIDv7: time-ordered); `run_metrics_run` answers one run's. Logs from
-- before have no measures to fill in.
CREATE TABLE run_metrics (
    job TEXT NOT NULL,
    name TEXT NOT NULL,
    partition_ref TEXT NOT NULL,
    job_run_id TEXT NOT NULL,
    value REAL NOT NULL,
    recorded_at INTEGER NOT NULL,
    PRIMARY KEY (job, name, partition_ref, job_run_id)
) WITHOUT ROWID;
CREATE INDEX run_metrics_run ON run_metrics (job_run_id);
