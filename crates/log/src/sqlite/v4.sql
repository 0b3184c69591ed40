-- Version 4: a claim keeps what it replaced. When a run claims a partition (`building`), the
-- partition's row remembers its state before (`prev_*`; `prev_status = ''` when there was no
-- row); when the run gives the claim up without building (`cancelled`: it never started, or was
-- cancelled), the row goes back to that state, or away. A build that stopped or was cancelled
-- thus leaves live, stale and missing partitions as they were, instead of `failed`.
ALTER TABLE partitions ADD COLUMN prev_status TEXT;
ALTER TABLE partitions ADD COLUMN prev_job_run_id TEXT;
ALTER TABLE partitions ADD COLUMN prev_build_request_id TEXT;
ALTER TABLE partitions ADD COLUMN prev_message TEXT;
ALTER TABLE partitions ADD COLUMN prev_updated_at INTEGER;
