-- Version 5: leases. A process's heartbeat renews its lease on the log; a process that takes the
-- work of a silent one over revokes its lease first, and a revoked lease is never renewed: its
-- holder learns that its work was taken over and stops (fencing).
ALTER TABLE heartbeats ADD COLUMN revoked INTEGER NOT NULL DEFAULT 0;
