-- Recurring jobs (as SQLite's 0007). A fire is taken by advancing next_run_at from
-- the value it was read at (a guarded UPDATE) in the same transaction as the job's
-- insert: a node firing the same schedule at once waits on the row, then finds
-- next_run_at moved on, so each fire time makes one job however many nodes run.
CREATE TABLE schedules (
    name          TEXT    PRIMARY KEY,
    cron          TEXT,
    every_seconds INTEGER,
    timezone      TEXT    NOT NULL DEFAULT 'UTC',
    type          TEXT    NOT NULL,
    payload       TEXT    NOT NULL DEFAULT '{}',
    priority      INTEGER NOT NULL DEFAULT 0,
    overlap       BOOLEAN NOT NULL DEFAULT true,
    paused        BOOLEAN NOT NULL DEFAULT false,
    source        TEXT    NOT NULL CHECK (source IN ('config', 'api')),
    next_run_at   BIGINT  NOT NULL,
    last_run_at   BIGINT,
    last_job_id   BIGINT,
    jobs_made     BIGINT  NOT NULL DEFAULT 0,
    fires_skipped BIGINT  NOT NULL DEFAULT 0,
    created_at    BIGINT  NOT NULL,
    updated_at    BIGINT  NOT NULL,
    CHECK ((cron IS NULL) <> (every_seconds IS NULL))
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE NOT paused;
-- The schedule that made a job, if one did.
ALTER TABLE jobs ADD COLUMN schedule TEXT;
