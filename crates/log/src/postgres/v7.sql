-- Version 7: ids people can type (see the SQLite schema's version 7). Prefixes are compared
-- bytewise, whatever the database's collation.
CREATE INDEX build_requests_by_short_id ON build_requests (right(build_request_id, 8));
CREATE INDEX job_runs_by_short_id ON job_runs (right(job_run_id, 8));
CREATE INDEX build_requests_by_id_c ON build_requests (build_request_id COLLATE "C");
CREATE INDEX job_runs_by_id_c ON job_runs (job_run_id COLLATE "C");
