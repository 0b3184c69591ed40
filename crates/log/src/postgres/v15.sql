-- Version 15: environments' events, by their own index, as on SQLite (sqlite/v16.sql).
CREATE INDEX events_of_environments ON events (idx) WHERE kind = 'environment';
