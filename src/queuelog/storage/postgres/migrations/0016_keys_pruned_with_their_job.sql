-- Deleting a job deletes the idempotency keys that name it (idempotency_keys, 0012),
-- whoever deletes it: a node older than 0012 prunes jobs without knowing the table,
-- and a key left naming a job gone would refuse its request for good. Keys already
-- left so are deleted here. Once per statement, from the rows it deleted.
DELETE FROM idempotency_keys AS k WHERE NOT EXISTS (SELECT 1 FROM jobs WHERE jobs.id = k.job_id);
CREATE FUNCTION queuelog_jobs_pruned() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    DELETE FROM idempotency_keys AS k USING deleted WHERE k.job_id = deleted.id;
    RETURN NULL;
END
$$;
CREATE TRIGGER jobs_pruned AFTER DELETE ON jobs
    REFERENCING OLD TABLE AS deleted
    FOR EACH STATEMENT EXECUTE FUNCTION queuelog_jobs_pruned();
