-- A job's 'enqueued' event is written by the statement that inserts the job (as on
-- SQLite): its values (the job's id, its creation time and its principal) come
-- from the row itself. Once per statement, from the rows it inserted, so a batch
-- records its events in one INSERT. ON CONFLICT DO NOTHING inserts no row for a
-- repeated idempotency key, so a repeat records no event, as before.
CREATE FUNCTION queuelog_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    SELECT id, created_at, 'enqueued', NULL, 'pending', principal
    FROM inserted ORDER BY id;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_enqueued AFTER INSERT ON jobs
    REFERENCING NEW TABLE AS inserted
    FOR EACH STATEMENT EXECUTE FUNCTION queuelog_jobs_enqueued();
