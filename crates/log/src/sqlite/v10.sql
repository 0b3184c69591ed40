-- Version 10: plans of no-op builds, kept so that the next build of the same request, while the
-- log holds nothing new, checks the files its plan looked at instead of planning again. A cache,
-- derived from the events, the graph and the data dir: deleting its rows loses nothing.
CREATE TABLE plan_cache (
    key      TEXT PRIMARY KEY,  -- the request, the graph's text, the date, the binary (hashed)
    log_idx  INTEGER NOT NULL,  -- the log as planned: no event after it but a no-op build's own
    body     BLOB NOT NULL,     -- the plan and what it found in the data dir (JSON)
    used_at  INTEGER NOT NULL   -- ns; the oldest entries go past `PLAN_CACHE_ENTRIES`
);
