-- DataBuild event log on PostgreSQL, schema version 1: the same tables, indexes and views as
-- the SQLite log (docs/event-log.md).
-- Times are nanoseconds since the Unix epoch; lists and maps are JSON text.

CREATE TABLE meta (
    key   TEXT PRIMARY KEY,
    value TEXT NOT NULL
);

-- The log itself: append-only, every view below is derived from it.
CREATE TABLE events (
    idx              BIGSERIAL PRIMARY KEY,
    event_id         TEXT NOT NULL,          -- a UUID, unique by construction
    timestamp        BIGINT NOT NULL,
    build_request_id TEXT,
    kind             TEXT NOT NULL,
    status           TEXT NOT NULL,
    partition_ref    TEXT,
    job              TEXT,
    job_run_id       TEXT,
    delegated_to     TEXT,
    message          TEXT,
    data             TEXT
);
CREATE INDEX events_by_build     ON events (build_request_id, idx) WHERE build_request_id IS NOT NULL;
CREATE INDEX events_by_partition ON events (partition_ref, idx)    WHERE partition_ref IS NOT NULL;
CREATE INDEX events_by_job       ON events (job, idx)              WHERE job IS NOT NULL;
CREATE INDEX events_by_run       ON events (job_run_id, idx)       WHERE job_run_id IS NOT NULL;
CREATE INDEX events_by_time      ON events (timestamp);

-- Projection: each partition a run has touched, with its global state.
CREATE TABLE partitions (
    partition_ref    TEXT PRIMARY KEY,
    status           TEXT NOT NULL,          -- building | available | failed | tainted
    job_run_id       TEXT,                   -- the run building it, or that last built it
    build_request_id TEXT,
    job              TEXT,
    data_version     TEXT,
    message          TEXT,
    updated_at       BIGINT NOT NULL
);
-- Listings page in bytewise ("C") order, as on SQLite, whatever the database's collation.
CREATE INDEX partitions_by_ref_c  ON partitions (partition_ref COLLATE "C");
CREATE INDEX partitions_by_status ON partitions (status, partition_ref COLLATE "C");

-- Projection: build requests.
CREATE TABLE build_requests (
    build_request_id TEXT PRIMARY KEY,
    status           TEXT NOT NULL,
    requested        TEXT NOT NULL,          -- JSON array of refs
    analyze_only     BOOLEAN NOT NULL DEFAULT FALSE,
    owner            TEXT,                   -- host/pid/start-time of the driving process
    message          TEXT,
    created_at       BIGINT NOT NULL,
    updated_at       BIGINT NOT NULL
);
CREATE INDEX build_requests_by_created ON build_requests (created_at);
CREATE INDEX build_requests_by_status  ON build_requests (status, created_at);
CREATE INDEX build_requests_unfinished ON build_requests (status)
    WHERE status IN ('received', 'planning', 'analysis_completed', 'executing') AND NOT analyze_only;

-- Projection: what each build request did about each partition it touched.
CREATE TABLE request_partitions (
    build_request_id TEXT NOT NULL,
    partition_ref    TEXT NOT NULL,
    status           TEXT NOT NULL,
    job_run_id       TEXT,
    updated_at       BIGINT NOT NULL,
    PRIMARY KEY (build_request_id, partition_ref)
);

-- Projection: job runs.
CREATE TABLE job_runs (
    job_run_id       TEXT PRIMARY KEY,
    job              TEXT NOT NULL,
    build_request_id TEXT,
    status           TEXT NOT NULL,
    outputs          TEXT NOT NULL,
    inputs           TEXT,
    args             TEXT,
    env              TEXT,
    scheduled_at     BIGINT,
    started_at       BIGINT,
    ended_at         BIGINT,
    exit_code        INTEGER,
    message          TEXT,
    relies_on        TEXT,
    pid              BIGINT,
    host             TEXT,
    owner            TEXT,                   -- host/pid/start-time of the driving process
    job_version      TEXT,
    input_versions   TEXT,                   -- JSON map: input ref -> data version at start
    log_path         TEXT
);
CREATE INDEX job_runs_by_job    ON job_runs (job, scheduled_at);
CREATE INDEX job_runs_by_job_status ON job_runs (job, status, scheduled_at);
CREATE INDEX job_runs_by_time   ON job_runs (scheduled_at);
CREATE INDEX job_runs_by_build  ON job_runs (build_request_id);
-- Only unfinished runs: crash recovery looks for them, and the index stays small.
CREATE INDEX job_runs_unfinished ON job_runs (status) WHERE status IN ('scheduled', 'running');

-- Views answering the common questions, for `databuild sql`.
CREATE VIEW partition_status AS
SELECT partition_ref,
       CASE status WHEN 'available' THEN 'live' ELSE status END AS status,
       job, build_request_id, job_run_id, data_version,
       to_char(to_timestamp(updated_at / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS updated
FROM partitions;

CREATE VIEW job_run_durations AS
SELECT job_run_id, job, build_request_id, status,
       (ended_at - started_at) / 1e6 AS duration_ms,
       to_char(to_timestamp(started_at / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS started
FROM job_runs;

CREATE VIEW build_request_summary AS
SELECT build_request_id, status, json_array_length(requested::json) AS requested_count,
       to_char(to_timestamp(created_at / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS') AS created,
       (updated_at - created_at) / 1e6 AS elapsed_ms
FROM build_requests;

CREATE VIEW events_per_hour AS
SELECT to_char(to_timestamp(timestamp / 1e9) AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:00') AS hour,
       kind, status, count(*) AS events
FROM events GROUP BY 1, 2, 3;

-- Liveness of the processes driving builds, for claims held by another machine.
CREATE TABLE heartbeats (
    owner TEXT PRIMARY KEY,
    at    BIGINT NOT NULL
);
