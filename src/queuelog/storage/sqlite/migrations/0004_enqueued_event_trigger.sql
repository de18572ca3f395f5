-- A job's 'enqueued' event is written by the statement that inserts the job: one
-- statement per enqueue (or per batch) instead of two, and the event's values
-- (the job's id, its creation time and its principal) come from the row itself.
-- ON CONFLICT DO NOTHING inserts no row for a repeated idempotency key, so a
-- repeat records no event, as before.
CREATE TRIGGER jobs_enqueued AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    VALUES (NEW.id, NEW.created_at, 'enqueued', NULL, 'pending', NEW.principal);
END;
