-- Pending jobs whose run_at is still ahead are "scheduled" and kept out of the
-- ready index, so a claim never walks past delayed jobs or retries in backoff.
-- A claim first promotes the scheduled jobs whose time has come.
ALTER TABLE jobs ADD COLUMN scheduled INTEGER NOT NULL DEFAULT 0;
UPDATE jobs SET scheduled = 1 WHERE status = 'pending';
DROP INDEX jobs_ready;
CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, id)
    WHERE status = 'pending' AND scheduled = 0;
-- Promotion, the next due time and the oldest ready job are all seeks on this one.
CREATE INDEX jobs_pending_run_at ON jobs (scheduled, run_at) WHERE status = 'pending';
