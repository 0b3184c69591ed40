-- Version 6: a build's plan is recorded in parts, its runs' own events only once claimed (see
-- the SQLite schema's version 6 for the indexes and the view).
CREATE INDEX job_runs_by_build_outputs ON job_runs (build_request_id, outputs, scheduled_at);
DROP INDEX job_runs_by_build;
CREATE INDEX events_of_build_requests ON events (build_request_id, idx) WHERE kind = 'build_request';

CREATE VIEW planned_runs AS
WITH planned AS (
    SELECT e.build_request_id, e.idx, p.n - 1 AS n,
           p.value ->> 0 AS job, (p.value -> 1)::text AS outputs
    FROM events e
    CROSS JOIN LATERAL json_array_elements(e.data::json -> 'plan') WITH ORDINALITY AS p(value, n)
    WHERE e.kind = 'build_request' AND e.status IN ('planning', 'executing')
      AND e.data::json -> 'plan' IS NOT NULL
)
SELECT planned.build_request_id, planned.job, planned.outputs,
       coalesce(r.status,
                CASE WHEN b.status IN ('completed', 'failed', 'cancelled') THEN 'not_run'
                     ELSE 'planned' END) AS status,
       r.job_run_id, planned.idx AS event_idx, planned.n AS position
FROM planned
JOIN build_requests b ON b.build_request_id = planned.build_request_id
LEFT JOIN LATERAL (
    SELECT status, job_run_id FROM job_runs l
    WHERE l.build_request_id = planned.build_request_id AND l.outputs = planned.outputs
    ORDER BY l.scheduled_at DESC LIMIT 1) r ON true;
