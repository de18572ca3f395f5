-- The insert of jobs also NOTIFYs the nodes' claimers (delivered at commit), so an
-- enqueue is one statement, and one job's enqueue its own transaction. The payload
-- names the schema and, where the session set it (queuelog.node, set on every
-- connection of a node's pool), the node that enqueued: that node's service wakes its
-- own long polls, so its listener leaves this notification to the other nodes. A
-- statement that inserted no row (every job a repeat of an idempotency key) records
-- no event and notifies no one.
CREATE OR REPLACE FUNCTION queuelog_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    SELECT id, created_at, 'enqueued', NULL, status, principal
    FROM inserted ORDER BY id;
    IF FOUND THEN
        PERFORM pg_notify('queuelog_ready', current_schema()
            || coalesce(':' || nullif(current_setting('queuelog.node', true), ''), ''));
    END IF;
    RETURN NULL;
END
$$;
