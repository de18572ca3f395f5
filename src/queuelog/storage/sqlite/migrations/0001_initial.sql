-- Times are integer microseconds since the Unix epoch (UTC): they sort and add in SQL.
CREATE TABLE jobs (
    id               INTEGER PRIMARY KEY AUTOINCREMENT,
    type             TEXT    NOT NULL,
    payload          TEXT    NOT NULL DEFAULT '{}',
    priority         INTEGER NOT NULL DEFAULT 0,
    status           TEXT    NOT NULL DEFAULT 'pending'
                     CHECK (status IN ('pending', 'running', 'completed', 'failed', 'cancelled')),
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
    UNIQUE (principal, idempotency_key)
);

-- The claim walks this index in claim order and stops at the first ready rows.
CREATE INDEX jobs_ready ON jobs (priority DESC, created_at, id) WHERE status = 'pending';
CREATE INDEX jobs_leases ON jobs (lease_expires_at) WHERE status = 'running';
CREATE INDEX jobs_status_type ON jobs (status, type);
CREATE INDEX jobs_principal ON jobs (principal, id);
CREATE INDEX jobs_finished ON jobs (status, updated_at)
    WHERE status IN ('completed', 'failed', 'cancelled');

CREATE TABLE job_events (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    job_id      INTEGER NOT NULL,
    at          INTEGER NOT NULL,
    event       TEXT    NOT NULL,
    from_status TEXT,
    to_status   TEXT    NOT NULL,
    actor       TEXT    NOT NULL,
    detail      TEXT
);
CREATE INDEX job_events_job ON job_events (job_id, id);

CREATE TABLE api_keys (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    name         TEXT    NOT NULL,
    roles        TEXT    NOT NULL,
    max_priority INTEGER NOT NULL,
    types        TEXT,
    key_hash     TEXT    NOT NULL UNIQUE,
    prefix       TEXT    NOT NULL,
    created_at   INTEGER NOT NULL,
    revoked_at   INTEGER
);
