-- Version 6: a build's plan is recorded in parts (`build_request planning` events, and
-- `executing` ones for runs a running build adds; each run as `[job, [outputs]]` in
-- `data.plan`), and each run's own events only once it is claimed.

-- A build's runs by their outputs (the view below looks a planned run's up), which serves
-- every lookup of a build's runs the old index did.
CREATE INDEX job_runs_by_build_outputs ON job_runs (build_request_id, outputs, scheduled_at);
DROP INDEX job_runs_by_build;
-- A build's own events (its plan's parts among them), without walking its other events.
CREATE INDEX events_of_build_requests ON events (build_request_id, idx) WHERE kind = 'build_request';

-- "Which runs does build X plan, and in which state is each": a run not claimed yet is
-- `planned` (`not_run` once its build has ended), else in the state of its latest run in that
-- build (a retry is a new run).
CREATE VIEW planned_runs AS
WITH planned AS (
    SELECT e.build_request_id, e.idx, CAST(p.key AS INTEGER) AS n,
           json_extract(p.value, '$[0]') AS job, json_extract(p.value, '$[1]') AS outputs
    FROM events e, json_each(e.data, '$.plan') p
    WHERE e.kind = 'build_request' AND e.status IN ('planning', 'executing')
)
SELECT planned.build_request_id, planned.job, planned.outputs,
       coalesce(r.status,
                CASE WHEN b.status IN ('completed', 'failed', 'cancelled') THEN 'not_run'
                     ELSE 'planned' END) AS status,
       r.job_run_id, planned.idx AS event_idx, planned.n AS position
FROM planned
JOIN build_requests b ON b.build_request_id = planned.build_request_id
LEFT JOIN job_runs r ON r.job_run_id = (
    SELECT job_run_id FROM job_runs l
    WHERE l.build_request_id = planned.build_request_id AND l.outputs = planned.outputs
    ORDER BY l.scheduled_at DESC LIMIT 1);
