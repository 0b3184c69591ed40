-- Version 6: a build's plan is recorded in parts (`build_request planning` events, each run of it
-- as `[job, [outputs]]` in `data.plan`), and each run's own events only once it is claimed. This
-- view answers "which runs does build X plan, and in which state is each": `planned` for a run
-- not yet claimed, else the state of its latest run in that build (a retry is a new run).
CREATE VIEW planned_runs AS
WITH planned AS (
    SELECT e.build_request_id, e.idx, CAST(p.key AS INTEGER) AS n,
           json_extract(p.value, '$[0]') AS job, json_extract(p.value, '$[1]') AS outputs
    FROM events e, json_each(e.data, '$.plan') p
    WHERE e.kind = 'build_request' AND e.status = 'planning'
),
latest AS (
    SELECT build_request_id, outputs, status, job_run_id, max(scheduled_at) AS scheduled_at
    FROM job_runs GROUP BY build_request_id, outputs
)
SELECT planned.build_request_id, planned.job, planned.outputs,
       coalesce(latest.status, 'planned') AS status, latest.job_run_id,
       planned.idx AS event_idx, planned.n AS position
FROM planned LEFT JOIN latest
    ON latest.build_request_id = planned.build_request_id AND latest.outputs = planned.outputs;
