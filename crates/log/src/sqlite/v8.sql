-- Version 8: lineage. A run records the instance of each input it read: the run that had built
-- it (`job_runs.input_runs`, a JSON map input ref -> run id; externals and sources have none,
-- their instance is their data version). `run_inputs` is the reverse index, a row per input a
-- run read: which runs read this instance (`lineage --downstream`, `taint --dry-run`).
ALTER TABLE job_runs ADD COLUMN input_runs TEXT;
CREATE TABLE run_inputs (
    input_ref    TEXT NOT NULL,
    input_run_id TEXT,                  -- the run that had built the input; NULL for externals
    data_version TEXT,                  -- the input's data version as the run started
    job_run_id   TEXT NOT NULL          -- the run that read it
);
CREATE INDEX run_inputs_by_input ON run_inputs (input_ref, input_run_id);
-- Runs recorded before version 8 read inputs whose instances were not recorded: their versions
-- are (a reader of an instance is then found by the instance's data version).
INSERT INTO run_inputs (input_ref, input_run_id, data_version, job_run_id)
SELECT je.key, NULL, je.value, j.job_run_id
  FROM job_runs j, json_each(j.input_versions) je
 WHERE j.input_versions IS NOT NULL AND json_valid(j.input_versions);
