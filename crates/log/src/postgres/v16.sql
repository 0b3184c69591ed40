-- Version 16: arrivals, as on SQLite (sqlite/v17.sql).
CREATE TABLE arrivals (
    partition_ref TEXT PRIMARY KEY,
    dataset TEXT NOT NULL,
    arrived_at BIGINT NOT NULL,
    data_version TEXT
);
CREATE INDEX arrivals_by_dataset ON arrivals (dataset, arrived_at);
