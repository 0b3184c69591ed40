-- Version 12: the code a run or a check ran, as its fingerprints, as on SQLite (sqlite/v13.sql).
ALTER TABLE job_runs ADD COLUMN code_versions TEXT;
ALTER TABLE partition_checks ADD COLUMN code_versions TEXT;
