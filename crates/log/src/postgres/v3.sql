-- Version 3: a claim keeps what it replaced, and a release restores it (see the SQLite store's
-- v4.sql). The count trigger now also counts a row going away.
ALTER TABLE partitions ADD COLUMN prev_status TEXT;
ALTER TABLE partitions ADD COLUMN prev_job_run_id TEXT;
ALTER TABLE partitions ADD COLUMN prev_build_request_id TEXT;
ALTER TABLE partitions ADD COLUMN prev_message TEXT;
ALTER TABLE partitions ADD COLUMN prev_updated_at BIGINT;
CREATE OR REPLACE FUNCTION count_partitions() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    IF TG_OP = 'UPDATE' THEN
        IF OLD.status IS NOT DISTINCT FROM NEW.status AND OLD.job IS NOT DISTINCT FROM NEW.job THEN
            RETURN NULL;
        END IF;
    END IF;
    IF TG_OP IN ('UPDATE', 'DELETE') THEN
        UPDATE partition_counts SET n = n - 1
            WHERE job = coalesce(OLD.job, '') AND status = OLD.status;
    END IF;
    IF TG_OP IN ('INSERT', 'UPDATE') THEN
        INSERT INTO partition_counts (job, status, n) VALUES (coalesce(NEW.job, ''), NEW.status, 1)
            ON CONFLICT (job, status) DO UPDATE SET n = partition_counts.n + 1;
    END IF;
    RETURN NULL;
END $$;
DROP TRIGGER partitions_counted ON partitions;
CREATE TRIGGER partitions_counted AFTER INSERT OR UPDATE OR DELETE ON partitions
    FOR EACH ROW EXECUTE FUNCTION count_partitions();
