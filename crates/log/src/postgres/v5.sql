-- Version 5: leases (see the SQLite schema's version 5). `at` is now the database's clock, in ns
-- since the epoch, so that no two hosts' clocks need agree on how long a holder was silent.
ALTER TABLE heartbeats ADD COLUMN revoked BOOLEAN NOT NULL DEFAULT false;
