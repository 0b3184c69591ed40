-- Version 5: leases. A process's heartbeat renews its lease on the log; a process that takes the
-- work of a silent one over revokes its lease first, and a revoked lease is never renewed: its
-- holder learns that its work was taken over and stops (fencing).
ALTER TABLE heartbeats ADD COLUMN revoked INTEGER NOT NULL DEFAULT 0;

-- A build request's requested refs, counted, and the first few: listings read these instead of
-- the whole list, so no listing's cost grows with one request's size.
ALTER TABLE build_requests ADD COLUMN requested_count INTEGER NOT NULL DEFAULT 0;
ALTER TABLE build_requests ADD COLUMN requested_head TEXT NOT NULL DEFAULT '[]';
UPDATE build_requests SET requested_count = json_array_length(requested),
    requested_head = (SELECT json_group_array(value)
                      FROM (SELECT value FROM json_each(build_requests.requested) LIMIT 10));
