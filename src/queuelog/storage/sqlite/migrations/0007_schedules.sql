-- Recurring jobs. A fire is taken by advancing next_run_at from the value it was
-- read at (a guarded UPDATE) in the same transaction as the job's insert: however
-- many nodes fire at once, one job per fire time.
CREATE TABLE schedules (
    name          TEXT    PRIMARY KEY,
    cron          TEXT,
    every_seconds INTEGER,
    timezone      TEXT    NOT NULL DEFAULT 'UTC',
    type          TEXT    NOT NULL,
    payload       TEXT    NOT NULL DEFAULT '{}',
    priority      INTEGER NOT NULL DEFAULT 0,
    overlap       INTEGER NOT NULL DEFAULT 1,
    paused        INTEGER NOT NULL DEFAULT 0,
    source        TEXT    NOT NULL CHECK (source IN ('config', 'api')),
    next_run_at   INTEGER NOT NULL,
    last_run_at   INTEGER,
    last_job_id   INTEGER,
    jobs_made     INTEGER NOT NULL DEFAULT 0,
    fires_skipped INTEGER NOT NULL DEFAULT 0,
    created_at    INTEGER NOT NULL,
    updated_at    INTEGER NOT NULL,
    CHECK ((cron IS NULL) <> (every_seconds IS NULL))
);
CREATE INDEX schedules_due ON schedules (next_run_at) WHERE paused = 0;
-- The schedule that made a job, if one did.
ALTER TABLE jobs ADD COLUMN schedule TEXT;
