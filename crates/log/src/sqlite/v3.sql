-- Version 3: the writer keeps `job_counts` and `partition_counts` itself, in the same transaction,
-- instead of triggers: it adds up what a batch changes and writes each (job, status) once at the
-- end of the batch. A table with a trigger also makes every write to it a statement SQLite must be
-- able to undo on its own, so it copied each page such a statement touched into a statement
-- journal first. Figures in BENCHMARKS.md. The counts the triggers kept stay as they are.
DROP TRIGGER job_runs_counted_on_insert;
DROP TRIGGER job_runs_counted_on_update;
DROP TRIGGER partitions_counted_on_insert;
DROP TRIGGER partitions_counted_on_update;
