-- Pending jobs whose run_at is still ahead are "scheduled" and kept out of the
-- ready index, so a claim never walks past delayed jobs or retries in backoff.
-- A claim first promotes the scheduled jobs whose time has come.
ALTER TABLE jobs ADD COLUMN scheduled BOOLEAN NOT NULL DEFAULT false;
UPDATE jobs SET scheduled = true WHERE status = 'pending';
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, id) INCLUDE (run_at, type)
    WHERE status = 'pending' AND NOT scheduled;
-- Promotion, the next due time and the oldest ready job are all seeks on this one.
DROP INDEX jobs_due;
CREATE INDEX jobs_pending_run_at ON jobs (scheduled, run_at) WHERE status = 'pending';
