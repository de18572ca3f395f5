-- Flow control. A job may carry a group (a tenant, an account); group_concurrency
-- counts running jobs per group.
ALTER TABLE jobs ADD COLUMN job_group TEXT;
-- A claim of a limited or paused type reads its ready jobs type by type, and the
-- ready jobs of a group-limited type group by group: one seek each, so jobs held
-- back by a limit are never walked past. The group index holds ungrouped jobs too
-- (job_group IS NULL is a seek on it), so those are not walked past either.
CREATE INDEX jobs_ready_type ON jobs (type, priority DESC, created_at, id)
    WHERE status = 'pending' AND scheduled = 0;
CREATE INDEX jobs_ready_group ON jobs (type, job_group, priority DESC, created_at, id)
    WHERE status = 'pending' AND scheduled = 0;
-- Running jobs per type and group: what concurrency and group_concurrency count.
CREATE INDEX jobs_running_group ON jobs (type, job_group) WHERE status = 'running';

-- A paused type has a row here (stored, so the pause holds across restarts).
CREATE TABLE type_pauses (
    type      TEXT    PRIMARY KEY,
    paused_by TEXT    NOT NULL,
    paused_at INTEGER NOT NULL
);
-- The audit record of what admins did to job types.
CREATE TABLE type_events (
    id    INTEGER PRIMARY KEY AUTOINCREMENT,
    type  TEXT    NOT NULL,
    at    INTEGER NOT NULL,
    event TEXT    NOT NULL,
    actor TEXT    NOT NULL
);
CREATE INDEX type_events_type ON type_events (type, id);
-- One row per job claimed of a rate-limited type, kept for the length of its window.
CREATE TABLE type_claims (
    type TEXT    NOT NULL,
    at   INTEGER NOT NULL
);
CREATE INDEX type_claims_type_at ON type_claims (type, at);
