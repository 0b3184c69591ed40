-- Version 13: the code a run or a check ran, as its fingerprints (JSON object, from the run's
-- `running` event's or the check event's `data.code_versions`; NULL for rows written before:
-- those compare on their version only).
ALTER TABLE job_runs ADD COLUMN code_versions TEXT;
ALTER TABLE partition_checks ADD COLUMN code_versions TEXT;
