-- Version 5: leases (see the SQLite schema's version 5). `at` is now the database's clock, in ns
-- since the epoch, so that no two hosts' clocks need agree on how long a holder was silent.
ALTER TABLE heartbeats ADD COLUMN revoked BOOLEAN NOT NULL DEFAULT false;

-- A build request's requested refs, counted, and the first few (see the SQLite schema).
ALTER TABLE build_requests ADD COLUMN requested_count BIGINT NOT NULL DEFAULT 0;
ALTER TABLE build_requests ADD COLUMN requested_head TEXT NOT NULL DEFAULT '[]';
UPDATE build_requests SET requested_count = json_array_length(requested::json),
    requested_head = coalesce((SELECT json_agg(value)::text
                               FROM (SELECT value FROM json_array_elements(requested::json)
                                     LIMIT 10) AS head), '[]');
