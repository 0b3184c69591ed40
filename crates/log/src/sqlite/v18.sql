-- Version 18: alert deliveries (format version 10). A starting service reads the newest ones
-- (which events they were sent for, to resume after them) by their own index, never a scan.
CREATE INDEX events_of_alerts ON events (idx) WHERE kind = 'alert';
