-- Workflows: a job may wait for other jobs (its dependencies). A job with unfinished
-- dependencies is 'waiting': outside every pending index, so a claim never walks past
-- it. The transition that ends a job updates its dependents in the same transaction.
--
-- SQLite cannot change a CHECK constraint in place, and the status CHECK must admit
-- 'waiting': the jobs table is made again with it (SQLite's documented way for a
-- change ALTER TABLE cannot make), keeping every row, id, index and the trigger. A
-- large table is copied once, by this migration.
CREATE TABLE jobs_new (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    type             TEXT    NOT NULL,
    payload          TEXT    NOT NULL DEFAULT '{}',
    priority         INTEGER NOT NULL DEFAULT 0,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('waiting', 'pending', 'running', 'completed', 'failed',
                                       'cancelled')),
    retry_count      INTEGER NOT NULL DEFAULT 0,
    max_retries      INTEGER NOT NULL DEFAULT 3,
    lease_seconds    INTEGER NOT NULL DEFAULT 30,
    principal        TEXT    NOT NULL,
    idempotency_key  TEXT,
    fingerprint      TEXT,
    run_at           INTEGER NOT NULL,
    claimed_at       INTEGER,
    lease_expires_at INTEGER,
    lease_token      TEXT,
    worker_id        TEXT,
    claimed_by       TEXT,
    error            TEXT,
    result           TEXT,
    created_at       INTEGER NOT NULL,
    updated_at       INTEGER NOT NULL,
    scheduled        INTEGER NOT NULL DEFAULT 0,
    job_group        TEXT,
    unique_key       TEXT,
    unique_hold      TEXT,
    progress         TEXT,
    schedule         TEXT,
    -- The job's dependencies as a JSON array of ids (NULL: none), as answers show them;
    -- job_dependencies holds the same pairs, indexed by the dependency.
    depends_on       TEXT,
    -- 'cancel' or 'run' (NULL: no dependencies).
    on_dependency_failure TEXT,
    -- While waiting: how many dependencies have not ended as this job needs (completed,
    -- or with 'run' ended at all). The job is pending once it reaches 0.
    deps_left        INTEGER NOT NULL DEFAULT 0,
    -- Set once a job depends on this one: only then does its end look for dependents.
    has_dependents   INTEGER NOT NULL DEFAULT 0,
    -- The dependency whose failure cancelled this job: a redrive of it brings this back.
    cancelled_by     INTEGER,
    UNIQUE (principal, idempotency_key)
);
INSERT INTO jobs_new (id, type, payload, priority, status, retry_count, max_retries,
                      lease_seconds, principal, idempotency_key, fingerprint, run_at,
                      claimed_at, lease_expires_at, lease_token, worker_id, claimed_by, error,
                      result, created_at, updated_at, scheduled, job_group, unique_key,
                      unique_hold, progress, schedule)
SELECT id, type, payload, priority, status, retry_count, max_retries, lease_seconds,
       principal, idempotency_key, fingerprint, run_at, claimed_at, lease_expires_at,
       lease_token, worker_id, claimed_by, error, result, created_at, updated_at, scheduled,
       job_group, unique_key, unique_hold, progress, schedule
FROM jobs ORDER BY id;
-- Ids are never handed out twice: the new table goes on from the old one's last id,
-- even when the jobs that had the highest ids were pruned.
DELETE FROM sqlite_sequence WHERE name = 'jobs_new';
INSERT INTO sqlite_sequence (name, seq) SELECT 'jobs_new', seq FROM sqlite_sequence
WHERE name = 'jobs';
DROP TABLE jobs;
ALTER TABLE jobs_new RENAME TO jobs;

-- The indexes as they were (0001, 0003, 0005), the unique key's with 'waiting' among
-- the active statuses (0006): a waiting job holds its unique key.
CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, id)
    WHERE status = 'pending' AND scheduled = 0;
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX jobs_status_type ON jobs (status, type);
CREATE INDEX jobs_principal ON jobs (principal, id);
CREATE INDEX jobs_finished ON jobs (status, updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled');
CREATE INDEX jobs_pending_run_at ON jobs (scheduled, run_at) WHERE status = 'pending';
CREATE INDEX jobs_ready_type ON jobs (type, priority DESC, created_at, id)
    WHERE status = 'pending' AND scheduled = 0;
CREATE INDEX jobs_ready_group ON jobs (type, job_group, priority DESC, created_at, id)
    WHERE status = 'pending' AND scheduled = 0;
CREATE INDEX jobs_running_group ON jobs (type, job_group) WHERE status = 'running';
CREATE UNIQUE INDEX jobs_unique_hold ON jobs (principal, type, unique_hold)
    WHERE unique_hold IS NOT NULL AND status IN ('waiting', 'pending', 'running');
CREATE INDEX jobs_unique_key ON jobs (principal, type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('waiting', 'pending', 'running');

-- The 'enqueued' event (0004), now to the status the job was made with: a job with
-- dependencies is made waiting.
CREATE TRIGGER jobs_enqueued AFTER INSERT ON jobs
BEGIN
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    VALUES (NEW.id, NEW.created_at, 'enqueued', NULL, NEW.status, NEW.principal);
END;

-- One row per (job, dependency). The end of a job finds its dependents by the second
-- index; the key finds a job's own dependencies.
CREATE TABLE job_dependencies (
    job_id        INTEGER NOT NULL,
    depends_on_id INTEGER NOT NULL,
    PRIMARY KEY (job_id, depends_on_id)
) WITHOUT ROWID;
CREATE INDEX job_dependencies_dependency ON job_dependencies (depends_on_id, job_id);
