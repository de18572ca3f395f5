-- Unique jobs and progress.
-- unique_key is the key the producer gave (shown on the job); unique_hold is the same
-- key while this job is the key's holder, and NULL once it gave the key up (a
-- replace while it ran made a newer job the holder). The unique index lets one
-- active job hold a key per principal and type: of two enqueues at once, one
-- inserts and the other finds it. Active is pending or running; a later status
-- (waiting) joins by adding it to the IN lists of both indexes and of the
-- job_unique_holder query.
ALTER TABLE jobs ADD COLUMN unique_key TEXT;
ALTER TABLE jobs ADD COLUMN unique_hold TEXT;
-- The last progress a worker reported (compact JSON text).
ALTER TABLE jobs ADD COLUMN progress TEXT;
CREATE UNIQUE INDEX jobs_unique_hold ON jobs (principal, type, unique_hold)
    WHERE unique_hold IS NOT NULL AND status IN ('pending', 'running');
-- An enqueue finds the active jobs with its key (the holder, and a running job that
-- gave the key up) by this one.
CREATE INDEX jobs_unique_key ON jobs (principal, type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('pending', 'running');
