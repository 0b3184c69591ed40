-- Version 11: a want whose build failed says when the service tries again, as on SQLite
-- (sqlite/v12.sql).
ALTER TABLE wants ADD COLUMN retry_at BIGINT;
