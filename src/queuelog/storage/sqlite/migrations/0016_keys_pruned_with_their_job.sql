-- Deleting a job deletes the idempotency keys that name it (idempotency_keys, 0012),
-- whoever deletes it: a node older than 0012 prunes jobs without knowing the table,
-- and a key left naming a job gone would refuse its request for good. Keys already
-- left so are deleted here.
DELETE FROM idempotency_keys WHERE job_id NOT IN (SELECT id FROM jobs);
CREATE TRIGGER jobs_pruned AFTER DELETE ON jobs
BEGIN
    DELETE FROM idempotency_keys WHERE job_id = OLD.id;
END;
