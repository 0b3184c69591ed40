-- Version 4: the writer keeps `job_counts` and `partition_counts` itself, in the events'
-- transaction, as the SQLite log has since its version 3: the same Rust code
-- (`crates/log/src/projection.rs`) now decides every count on both backends, adding up what a
-- batch changes and writing each (job, status) once at the end of the batch. The counts the
-- triggers kept stay as they are. A databuild older than this version refuses to open the log
-- (its schema is newer); one already connected when this migration runs would go on appending
-- without counting, so stop older writers before upgrading (RELIABILITY.md).
DROP TRIGGER job_runs_counted ON job_runs;
DROP TRIGGER partitions_counted ON partitions;
DROP FUNCTION count_job_runs();
DROP FUNCTION count_partitions();
