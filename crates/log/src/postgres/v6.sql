-- Version 6: a build's plan is recorded in parts, its runs' own events only once claimed (see
-- the SQLite schema's version 6 for the view's meaning).
CREATE VIEW planned_runs AS
WITH planned AS (
    SELECT e.build_request_id, e.idx, p.n - 1 AS n,
           p.value ->> 0 AS job, (p.value -> 1)::text AS outputs
    FROM events e
    CROSS JOIN LATERAL json_array_elements(e.data::json -> 'plan') WITH ORDINALITY AS p(value, n)
    WHERE e.kind = 'build_request' AND e.status = 'planning' AND e.data::json -> 'plan' IS NOT NULL
),
latest AS (
    SELECT DISTINCT ON (build_request_id, outputs) build_request_id, outputs, status, job_run_id
    FROM job_runs ORDER BY build_request_id, outputs, scheduled_at DESC
)
SELECT planned.build_request_id, planned.job, planned.outputs,
       coalesce(latest.status, 'planned') AS status, latest.job_run_id,
       planned.idx AS event_idx, planned.n AS position
FROM planned LEFT JOIN latest
    ON latest.build_request_id = planned.build_request_id AND latest.outputs = planned.outputs;
