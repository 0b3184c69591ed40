-- Version 10: a build's delegations and its checks, without walking its other events, as on
-- SQLite (sqlite/v11.sql).
CREATE INDEX events_of_delegations ON events (build_request_id, idx) WHERE kind = 'delegation';
CREATE INDEX events_of_checks ON events (build_request_id, idx) WHERE kind = 'check';
