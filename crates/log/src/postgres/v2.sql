-- Version 2: sources and versioned tables.
-- `alias` events (a table's alias promoted to a version) are few and read at every planning:
-- a partial index finds them without scanning the log. `sealed` / `expired` partition statuses
-- need no schema change.
CREATE INDEX events_of_alias ON events (idx) WHERE kind = 'alias';
