-- Version 2: sources, versioned tables and wants.
-- `alias` events (a table's alias promoted to a version) are few and read at every planning:
-- a partial index finds them without scanning the log. `sealed` / `expired` partition statuses
-- need no schema change.
CREATE INDEX events_of_alias ON events (idx) WHERE kind = 'alias';
-- Wants: standing requests for partitions, acted on by the service's reconciler.
CREATE TABLE wants (
    want_id         TEXT PRIMARY KEY,
    status          TEXT NOT NULL,      -- requested, waiting, satisfied, expired, cancelled
    refs            TEXT NOT NULL,      -- JSON array
    created_at      BIGINT NOT NULL,
    expires_at      BIGINT,
    sla_seconds     BIGINT,
    recurring       TEXT,               -- the [[want]] of the graph file it was made from
    waiting_for     TEXT,               -- the partition it waits for
    message         TEXT,               -- why it waits, or what it is doing
    build_request_id TEXT,              -- the build (or upstream build) started for it
    sla_missed      BIGINT NOT NULL DEFAULT 0,
    updated_at      BIGINT NOT NULL
);
CREATE INDEX wants_by_status ON wants (status, created_at);
CREATE INDEX wants_by_recurring ON wants (recurring, created_at) WHERE recurring IS NOT NULL;
-- Want events are read back by the reconciler when it starts (which SLA misses are recorded).
CREATE INDEX events_of_wants ON events (idx) WHERE kind = 'want';

-- Runs by job and status, kept by a trigger on job_runs, so job metrics read a few rows instead of
-- counting every run (filled from job_runs for logs written by version 1).
CREATE TABLE job_counts (
    job               TEXT NOT NULL,
    status            TEXT NOT NULL,
    n                 BIGINT NOT NULL,
    last_scheduled_at BIGINT,
    PRIMARY KEY (job, status)
);
INSERT INTO job_counts (job, status, n, last_scheduled_at)
    SELECT job, status, count(*), max(scheduled_at) FROM job_runs GROUP BY job, status;
CREATE FUNCTION count_job_runs() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.status IS NOT DISTINCT FROM NEW.status THEN
            RETURN NULL;
        END IF;
        UPDATE job_counts SET n = n - 1 WHERE job = OLD.job AND status = OLD.status;
        INSERT INTO job_counts (job, status, n) VALUES (NEW.job, NEW.status, 1)
            ON CONFLICT (job, status) DO UPDATE SET n = job_counts.n + 1;
    ELSE
        INSERT INTO job_counts (job, status, n, last_scheduled_at)
            VALUES (NEW.job, NEW.status, 1, NEW.scheduled_at)
            ON CONFLICT (job, status) DO UPDATE SET n = job_counts.n + 1,
                last_scheduled_at = greatest(job_counts.last_scheduled_at, excluded.last_scheduled_at);
    END IF;
    RETURN NULL;
END $$;
CREATE TRIGGER job_runs_counted AFTER INSERT OR UPDATE ON job_runs
    FOR EACH ROW EXECUTE FUNCTION count_job_runs();

-- Partitions by job and status (job '' for partitions no job built), kept by a trigger, so the
-- datasets view reads a few rows instead of counting every partition.
CREATE TABLE partition_counts (
    job    TEXT NOT NULL,
    status TEXT NOT NULL,
    n      BIGINT NOT NULL,
    PRIMARY KEY (job, status)
);
INSERT INTO partition_counts (job, status, n)
    SELECT coalesce(job, ''), status, count(*) FROM partitions GROUP BY 1, 2;
CREATE FUNCTION count_partitions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.status IS NOT DISTINCT FROM NEW.status AND OLD.job IS NOT DISTINCT FROM NEW.job THEN
            RETURN NULL;
        END IF;
        UPDATE partition_counts SET n = n - 1
            WHERE job = coalesce(OLD.job, '') AND status = OLD.status;
    END IF;
    INSERT INTO partition_counts (job, status, n) VALUES (coalesce(NEW.job, ''), NEW.status, 1)
        ON CONFLICT (job, status) DO UPDATE SET n = partition_counts.n + 1;
    RETURN NULL;
END $$;
CREATE TRIGGER partitions_counted AFTER INSERT OR UPDATE ON partitions
    FOR EACH ROW EXECUTE FUNCTION count_partitions();
