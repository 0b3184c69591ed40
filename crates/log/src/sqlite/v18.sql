-- Version 18: what the home page, `/metrics`, the wants pages and a starting service's alerts
-- read, kept as projections or indexed instead of read back from every event of its kind.
-- The external partitions recorded late (an `arrival` `late` event) that have not arrived since:
-- an arrival removes its row.
CREATE TABLE late_partitions (
    partition_ref TEXT PRIMARY KEY,
    recorded_at INTEGER NOT NULL
);
-- Each ref's latest `late` event in log order (`max(idx)` picks the row its bare `timestamp`
-- comes from), as appends keep it.
INSERT INTO late_partitions (partition_ref, recorded_at)
    SELECT partition_ref, timestamp FROM (
        SELECT partition_ref, timestamp, max(idx) FROM events
         WHERE kind = 'arrival' AND status = 'late' AND partition_ref IS NOT NULL
           AND partition_ref NOT IN (SELECT partition_ref FROM arrivals)
         GROUP BY partition_ref);
-- A want's deadline (`--by`, ns), as its `requested` event says.
ALTER TABLE wants ADD COLUMN deadline INTEGER;
UPDATE wants SET deadline = asked.deadline
  FROM (SELECT json_extract(data, '$.want_id') AS want_id,
               json_extract(data, '$.deadline') AS deadline
          FROM events
         WHERE kind = 'want' AND status = 'requested'
           AND json_extract(data, '$.deadline') IS NOT NULL) AS asked
 WHERE wants.want_id = asked.want_id;
-- Alert deliveries (format version 10): a starting service reads the newest ones (which events
-- they were sent for, to resume after them) by their own index, never a scan.
CREATE INDEX events_of_alerts ON events (idx) WHERE kind = 'alert';
