-- Version 9: checks. `partition_checks` holds the latest result of each (partition, check), kept
-- in the transaction of its `check` event: whether it passed (`completed`) or `failed`, whether
-- it blocks, the instance it checked (`job_run_id`, the run that built the partition), the
-- check's version and command when it ran, its message and metrics. A partition whose current
-- run has a failed blocking check is not live (`partition_status` says `check_failed`).
CREATE TABLE partition_checks (
    partition_ref    TEXT NOT NULL,
    check_name       TEXT NOT NULL,
    status           TEXT NOT NULL,        -- completed (passed) / failed
    blocking         INTEGER NOT NULL,
    job_run_id       TEXT NOT NULL,        -- the instance checked
    job              TEXT,                 -- the job that built it
    build_request_id TEXT,                 -- the build it ran in (none: `databuild check`)
    check_version    TEXT,
    command          TEXT,                 -- JSON list; NULL for checks a job reported inline
    inline           INTEGER NOT NULL DEFAULT 0,
    message          TEXT,
    metrics          TEXT,                 -- JSON
    event_idx        INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    PRIMARY KEY (partition_ref, check_name)
);
-- Planning asks whether any blocking check failed at all before it reads them per partition.
CREATE INDEX partition_checks_blocking_failures ON partition_checks (partition_ref)
    WHERE status = 'failed' AND blocking = 1;
DROP VIEW partition_status;
CREATE VIEW partition_status AS
SELECT p.partition_ref,
       CASE WHEN p.status = 'available' AND EXISTS (
                SELECT 1 FROM partition_checks c
                 WHERE c.partition_ref = p.partition_ref AND c.job_run_id = p.job_run_id
                   AND c.status = 'failed' AND c.blocking = 1)
            THEN 'check_failed'
            WHEN p.status = 'available' THEN 'live'
            ELSE p.status END AS status,
       p.job, p.build_request_id, p.job_run_id, p.data_version,
       datetime(p.updated_at / 1000000000, 'unixepoch') AS updated
FROM partitions p;
CREATE VIEW check_results AS
SELECT c.partition_ref, c.check_name,
       CASE c.status WHEN 'completed' THEN 'passed' ELSE 'failed' END AS result,
       c.blocking, c.job, c.job_run_id,
       (p.job_run_id IS c.job_run_id) AS current,
       c.check_version, c.message, c.metrics, c.inline,
       datetime(c.updated_at / 1000000000, 'unixepoch') AS updated
FROM partition_checks c LEFT JOIN partitions p ON p.partition_ref = c.partition_ref;
