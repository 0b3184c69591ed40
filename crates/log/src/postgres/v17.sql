-- Version 17: the newest alert deliveries by their own index, as on SQLite (sqlite/v18.sql).
CREATE INDEX events_of_alerts ON events (idx) WHERE kind = 'alert';
