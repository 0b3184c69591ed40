-- Version 13: the partial index of unfinished runs covers `queued`, as on SQLite (sqlite/v14.sql).
DROP INDEX job_runs_unfinished;
CREATE INDEX job_runs_unfinished ON job_runs (status)
    WHERE status IN ('scheduled', 'queued', 'running');
