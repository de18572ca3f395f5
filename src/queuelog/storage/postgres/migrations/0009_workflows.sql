-- Workflows: a job may wait for other jobs (its dependencies). A job with unfinished
-- dependencies is 'waiting': outside every pending index, so a claim never walks past
-- it. The transition that ends a job updates its dependents in the same transaction.
ALTER TABLE jobs DROP CONSTRAINT jobs_status_check;
ALTER TABLE jobs ADD CONSTRAINT jobs_status_check
    CHECK (status IN ('waiting', 'pending', 'running', 'completed', 'failed', 'cancelled'));
-- depends_on: the job's dependencies as a JSON array of ids (NULL: none), as answers
-- show them; job_dependencies holds the same pairs, indexed by the dependency.
-- on_dependency_failure: 'cancel' or 'run' (NULL: no dependencies).
-- deps_left: while waiting, how many dependencies have not ended as this job needs
-- (completed, or with 'run' ended at all); the job is pending once it reaches 0.
-- has_dependents: set once a job depends on this one; only then does its end look
-- for dependents.
-- cancelled_by: the dependency whose failure cancelled this job; a redrive of it
-- brings this one back.
ALTER TABLE jobs
    ADD COLUMN depends_on TEXT,
    ADD COLUMN on_dependency_failure TEXT,
    ADD COLUMN deps_left INTEGER NOT NULL DEFAULT 0,
    ADD COLUMN has_dependents BOOLEAN NOT NULL DEFAULT false,
    ADD COLUMN cancelled_by BIGINT;

-- A waiting job holds its unique key (0006): 'waiting' joins the active statuses.
DROP INDEX jobs_unique_hold;
CREATE UNIQUE INDEX jobs_unique_hold ON jobs (principal, type, unique_hold)
    WHERE unique_hold IS NOT NULL AND status IN ('waiting', 'pending', 'running');
DROP INDEX jobs_unique_key;
CREATE INDEX jobs_unique_key ON jobs (principal, type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('waiting', 'pending', 'running');

-- The 'enqueued' event (0004), now to the status the job was made with: a job with
-- dependencies is made waiting.
CREATE OR REPLACE FUNCTION queuelog_jobs_enqueued() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    SELECT id, created_at, 'enqueued', NULL, status, principal
    FROM inserted ORDER BY id;
    RETURN NULL;
END
$$;

-- One row per (job, dependency). The end of a job finds its dependents by the second
-- index; the key finds a job's own dependencies.
CREATE TABLE job_dependencies (
    job_id        BIGINT NOT NULL,
    depends_on_id BIGINT NOT NULL,
    PRIMARY KEY (job_id, depends_on_id)
);
CREATE INDEX job_dependencies_dependency ON job_dependencies (depends_on_id, job_id);
