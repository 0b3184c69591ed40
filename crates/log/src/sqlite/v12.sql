-- Version 12: a want whose build failed says when the service tries again (ns since the epoch,
-- from its latest `waiting` event's `data.retry_at`; NULL otherwise).
ALTER TABLE wants ADD COLUMN retry_at INTEGER;
