-- Version 7: ids people can type. `builds`, `runs` and `cancel` take a prefix of an id (served
-- by the primary keys) or its short form, the last 8 characters the CLI and the dashboard show
-- (the random part of a UUID v7: the first characters of runs minted together are the same).
CREATE INDEX build_requests_by_short_id ON build_requests (substr(build_request_id, -8));
CREATE INDEX job_runs_by_short_id ON job_runs (substr(job_run_id, -8));
