-- Version 17: arrivals (format version 8). When each external partition was first seen
-- available, by dataset: forecasts read a dataset's most recent ones by (dataset, arrived_at),
-- and recording reads which of a plan's external refs have one by its key.
CREATE TABLE arrivals (
    partition_ref TEXT PRIMARY KEY,
    dataset TEXT NOT NULL,
    arrived_at INTEGER NOT NULL,
    data_version TEXT
);
CREATE INDEX arrivals_by_dataset ON arrivals (dataset, arrived_at);
