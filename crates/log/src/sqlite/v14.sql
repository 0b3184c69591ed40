-- Version 14: the partial index of unfinished runs covers `queued` (a claimed run whose process
-- has not started), so gc's read of every unfinished run is read by it instead of a scan.
DROP INDEX job_runs_unfinished;
CREATE INDEX job_runs_unfinished ON job_runs (status)
    WHERE status IN ('scheduled', 'queued', 'running');
