-- An idempotency key whose request a unique key's holder settled (kept, or replaced):
-- no job was made with it, so it names that holder here, with the request's
-- fingerprint. The request sent again is answered by the same job, even once the
-- job has ended; another request with the key is refused. Pruning a job deletes
-- the keys that name it.
CREATE TABLE idempotency_keys (
    principal TEXT NOT NULL,
    idempotency_key TEXT NOT NULL,
    fingerprint TEXT,
    job_id BIGINT NOT NULL,
    PRIMARY KEY (principal, idempotency_key)
);
CREATE INDEX idempotency_keys_job ON idempotency_keys (job_id);
