-- Version 9: checks, as on SQLite (sqlite/v9.sql).
CREATE TABLE partition_checks (
    partition_ref    TEXT NOT NULL,
    check_name       TEXT NOT NULL,
    status           TEXT NOT NULL,
    blocking         BOOLEAN NOT NULL,
    job_run_id       TEXT NOT NULL,
    job              TEXT,
    build_request_id TEXT,
    check_version    TEXT,
    command          TEXT,
    inline           BOOLEAN NOT NULL DEFAULT false,
    message          TEXT,
    metrics          TEXT,
    event_idx        BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL,
    PRIMARY KEY (partition_ref, check_name)
);
CREATE INDEX partition_checks_blocking_failures ON partition_checks (partition_ref)
    WHERE status = 'failed' AND blocking;
DROP VIEW partition_status;
CREATE VIEW partition_status AS
SELECT p.partition_ref,
       CASE WHEN p.status = 'available' AND EXISTS (
                SELECT 1 FROM partition_checks c
                 WHERE c.partition_ref = p.partition_ref AND c.job_run_id = p.job_run_id
                   AND c.status = 'failed' AND c.blocking)
            THEN 'check_failed'
            WHEN p.status = 'available' THEN 'live'
            ELSE p.status END AS status,
       p.job, p.build_request_id, p.job_run_id, p.data_version,
       to_char(to_timestamp(p.updated_at / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS updated
FROM partitions p;
CREATE VIEW check_results AS
SELECT c.partition_ref, c.check_name,
       CASE c.status WHEN 'completed' THEN 'passed' ELSE 'failed' END AS result,
       c.blocking, c.job, c.job_run_id,
       (p.job_run_id IS NOT DISTINCT FROM c.job_run_id) AS current,
       c.check_version, c.message, c.metrics, c.inline,
       to_char(to_timestamp(c.updated_at / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS updated
FROM partition_checks c LEFT JOIN partitions p ON p.partition_ref = c.partition_ref;
