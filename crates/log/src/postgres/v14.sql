-- Version 14: every run's measures and reported metrics, as on SQLite (sqlite/v15.sql).
CREATE TABLE run_metrics (
    job TEXT NOT NULL,
    name TEXT NOT NULL,
    partition_ref TEXT NOT NULL,
    job_run_id TEXT NOT NULL,
    value DOUBLE PRECISION NOT NULL,
    recorded_at BIGINT NOT NULL,
    PRIMARY KEY (job, name, partition_ref, job_run_id)
);
CREATE INDEX run_metrics_run ON run_metrics (job_run_id);
-- Key order byte by byte, whatever the database's collation (`projection::read::POSTGRES_BYTES`).
CREATE INDEX run_metrics_key_c ON run_metrics (job, name, partition_ref COLLATE "C", job_run_id COLLATE "C");
