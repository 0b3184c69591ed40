-- Version 16: environments (format version 7). Their events are few and read whole (the last
-- promotion of an environment, what `env list` shows), by their own index, never a scan.
CREATE INDEX events_of_environments ON events (idx) WHERE kind = 'environment';
