-- Workflows: a job may wait for other jobs (its dependencies). A job with unfinished
-- dependencies is 'waiting': outside every pending index, so a claim never walks past
-- it. The transition that ends a job updates its dependents in the same transaction.
--
-- depends_on: the job's dependencies as a JSON array of ids (NULL: none), as answers
-- show them; job_dependencies holds the same pairs, indexed by the dependency.
-- on_dependency_failure: 'cancel' or 'run' (NULL: no dependencies).
-- deps_left: while waiting, how many dependencies have not ended as this job needs
-- (completed, or with 'run' ended at all); the job is pending once it reaches 0.
-- has_dependents: set once a job depends on this one; only then does its end look
-- for dependents.
-- cancelled_by: the dependency whose failure cancelled this job; a redrive of it
-- brings this one back.
ALTER TABLE jobs ADD COLUMN depends_on TEXT;
ALTER TABLE jobs ADD COLUMN on_dependency_failure TEXT;
ALTER TABLE jobs ADD COLUMN deps_left INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN has_dependents INTEGER NOT NULL DEFAULT 0;
ALTER TABLE jobs ADD COLUMN cancelled_by INTEGER;

-- The status CHECK (0001) must admit 'waiting', and SQLite cannot alter a CHECK. A
-- wider list of values changes nothing stored and no row breaks it, so the table's
-- definition is edited in place, SQLite's documented way for a change ALTER TABLE
-- cannot make (lang_altertable.html, "making other kinds of table schema changes"),
-- after the ALTERs above, which work from the definition as it was. The runner then
-- has the connection read the schema again (a new schema version), so the migrations
-- after this one see the edit. Copying the table instead would lose the columns that
-- migrations numbered after this one add, when they ran first.
PRAGMA writable_schema = ON;
UPDATE sqlite_schema
SET sql = replace(sql,
                  'CHECK (status IN (''pending'', ''running'', ''completed'', ''failed'', ''cancelled''))',
                  'CHECK (status IN (''waiting'', ''pending'', ''running'', ''completed'', ''failed'', ''cancelled''))')
WHERE type = 'table' AND name = 'jobs';
PRAGMA writable_schema = OFF;

-- A waiting job holds its unique key (0006): 'waiting' joins the active statuses.
DROP INDEX jobs_unique_hold;
CREATE UNIQUE INDEX jobs_unique_hold ON jobs (principal, type, unique_hold)
    WHERE unique_hold IS NOT NULL AND status IN ('waiting', 'pending', 'running');
DROP INDEX jobs_unique_key;
CREATE INDEX jobs_unique_key ON jobs (principal, type, unique_key)
    WHERE unique_key IS NOT NULL AND status IN ('waiting', 'pending', 'running');

-- The 'enqueued' event (0004), now to the status the job was made with: a job with
-- dependencies is made waiting.
DROP TRIGGER jobs_enqueued;
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
