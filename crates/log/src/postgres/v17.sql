-- Version 17: late partitions and wants' deadlines as projections, and alert deliveries
-- indexed, as on SQLite (sqlite/v18.sql).
CREATE TABLE late_partitions (
    partition_ref TEXT PRIMARY KEY,
    recorded_at BIGINT NOT NULL
);
INSERT INTO late_partitions (partition_ref, recorded_at)
    SELECT DISTINCT ON (partition_ref) partition_ref, timestamp FROM events
     WHERE kind = 'arrival' AND status = 'late' AND partition_ref IS NOT NULL
       AND partition_ref NOT IN (SELECT partition_ref FROM arrivals)
     ORDER BY partition_ref, idx DESC;
ALTER TABLE wants ADD COLUMN deadline BIGINT;
UPDATE wants SET deadline = asked.deadline
  FROM (SELECT data::json ->> 'want_id' AS want_id,
               (data::json ->> 'deadline')::BIGINT AS deadline
          FROM events
         WHERE kind = 'want' AND status = 'requested'
           AND data::json ->> 'deadline' IS NOT NULL) AS asked
 WHERE wants.want_id = asked.want_id;
-- The newest alert deliveries by their own index, as on SQLite.
CREATE INDEX events_of_alerts ON events (idx) WHERE kind = 'alert';
