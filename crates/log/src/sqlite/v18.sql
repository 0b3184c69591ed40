-- Version 18: what the home page, `/metrics` and the wants pages read on every request, kept as
-- projections instead of read back from every event of its kind each time.
-- The external partitions recorded late (an `arrival` `late` event) that have not arrived since:
-- an arrival removes its row.
CREATE TABLE late_partitions (
    partition_ref TEXT PRIMARY KEY,
    recorded_at INTEGER NOT NULL
);
INSERT INTO late_partitions (partition_ref, recorded_at)
    SELECT partition_ref, max(timestamp) FROM events
     WHERE kind = 'arrival' AND status = 'late' AND partition_ref IS NOT NULL
       AND partition_ref NOT IN (SELECT partition_ref FROM arrivals)
     GROUP BY partition_ref;
-- A want's deadline (`--by`, ns), as its `requested` event says.
ALTER TABLE wants ADD COLUMN deadline INTEGER;
UPDATE wants SET deadline = asked.deadline
  FROM (SELECT json_extract(data, '$.want_id') AS want_id,
               json_extract(data, '$.deadline') AS deadline
          FROM events
         WHERE kind = 'want' AND status = 'requested'
           AND json_extract(data, '$.deadline') IS NOT NULL) AS asked
 WHERE wants.want_id = asked.want_id;
