-- Version 8: lineage, as on SQLite (sqlite/v8.sql): `job_runs.input_runs` and the reverse index
-- `run_inputs`, filled for runs recorded before it from their `input_versions`.
ALTER TABLE job_runs ADD COLUMN input_runs TEXT;
CREATE TABLE run_inputs (
    input_ref    TEXT NOT NULL,
    input_run_id TEXT,
    data_version TEXT,
    job_run_id   TEXT NOT NULL
);
CREATE INDEX run_inputs_by_input ON run_inputs (input_ref, input_run_id);
INSERT INTO run_inputs (input_ref, input_run_id, data_version, job_run_id)
SELECT je.key, NULL, je.value, j.job_run_id
  FROM job_runs j, json_each_text(j.input_versions::json) je
 WHERE j.input_versions IS NOT NULL AND j.input_versions LIKE '{%';
