-- Version 11: a build's delegations and its checks, without walking its other events. Every
-- event of a build names it, so `events_by_build` serves "the delegations of build X" by reading
-- all of X's events (six a run): 0.05 s at 24k runs, seconds for a million-run backfill, in each
-- build's summary and its dashboard page. Both kinds are rare: these indexes cost nothing to the
-- events of runs and partitions.
CREATE INDEX events_of_delegations ON events (build_request_id, idx) WHERE kind = 'delegation';
CREATE INDEX events_of_checks ON events (build_request_id, idx) WHERE kind = 'check';
