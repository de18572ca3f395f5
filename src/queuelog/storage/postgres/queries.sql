-- Named queries for the PostgreSQL backend: the same names as SQLite's queries.sql,
-- plus the few only PostgreSQL needs (migration lock, notifications).
-- Parameters are always bound (%(name)s), never formatted. A parameter that may be
-- NULL is cast so the server knows its type.

-- name: migrate_lock
-- Several nodes may start at once: the first migrates, the others wait and then
-- find nothing left to do. Keyed by schema, so schemas migrate independently.
-- It waits as long as the others' migration takes, and its statements for the locks they
-- need: no lock_timeout, for its transaction alone (two statements: no parameters).
SET LOCAL lock_timeout = 0;
SELECT pg_advisory_xact_lock(hashtext('queuelog.migrate'), hashtext(current_schema()));

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY);

-- name: migrations_table_found
-- Whether the search_path names a schema that exists, and queuelog made its tables in the
-- first it names, where they would be made (not in any it names: to_regclass alone).
SELECT current_schema() IS NOT NULL AS schema,
       to_regclass(quote_ident(current_schema()) || '.schema_migrations') IS NOT NULL AS found;

-- name: migrations_done
SELECT version FROM schema_migrations;

-- name: migration_record
INSERT INTO schema_migrations (version) VALUES (%(version)s);

-- name: session_settings
-- The session's durability, the node its inserts of jobs name when they NOTIFY
-- (migration 0011), and how long a statement waits for a lock another program holds
-- (a LOCK TABLE, a long migration) before it is refused. No JIT compilation: every
-- statement here is short, and where statistics miss a burst of jobs a recursive
-- workflow statement's estimate passed jit_above_cost, and compiling it took longer
-- than running it many times over.
SELECT set_config('synchronous_commit', %(durability)s, false),
       set_config('queuelog.node', %(node)s, false),
       set_config('lock_timeout', %(lock_timeout)s, false),
       set_config('jit', 'off', false);

-- name: job_ready_notify
-- Delivered at commit, to every node LISTENing; the payload names the schema so
-- nodes of another queue in the same database ignore it.
SELECT pg_notify('queuelog_ready', current_schema());

-- name: job_finished_notify
-- Delivered at commit, to every node LISTENing: the schema, a colon and the ids of
-- the jobs that finished, comma-separated. Requests awaiting their results wake.
SELECT pg_notify('queuelog_finished', current_schema() || ':' || %(ids)s);

-- name: current_schema
SELECT current_schema() AS name;

-- name: job_insert_batch
-- Every job of the JSON array %(jobs)s in one statement. A job whose
-- (principal, idempotency_key) is taken, by a job or in idempotency_keys, or whose
-- unique key an active job holds (jobs_unique_hold), is skipped. Ids rise in the
-- array's order (numbered before the insert); the rows go in in their keys' order, so
-- two batches of the same keys, listed in other orders, take the keys one after the
-- other instead of each holding one the other waits for (a deadlock).
-- json_to_recordset reads each job's object once into typed columns; a ->> per column
-- parses the object again for each of them, which took half the time of a batch of 500.
INSERT INTO jobs (id, type, payload, priority, max_retries, lease_seconds, principal,
                  idempotency_key, fingerprint, run_at, scheduled, created_at, updated_at,
                  unique_key, unique_hold, job_group,
                  traceparent, tracestate, status, on_dependency_failure)
SELECT j.id, j.type, j.payload, j.priority, j.max_retries, j.lease_seconds, j.principal,
       j.idempotency_key, j.fingerprint, j.run_at, j.run_at > %(now)s::bigint,
       %(now)s, %(now)s, j.unique_key, j.unique_key, j."group",
       j.traceparent, j.tracestate, j.status, j.on_dependency_failure
FROM (SELECT nextval('jobs_id_seq') AS id, r.*
      FROM ROWS FROM (json_to_recordset(%(jobs)s::json) AS (
               type text, payload text, priority integer, max_retries integer,
               lease_seconds integer, principal text, idempotency_key text,
               fingerprint text, run_at bigint, unique_key text, "group" text,
               traceparent text, tracestate text, status text,
               on_dependency_failure text)) WITH ORDINALITY AS r
      ORDER BY r.ordinality) AS j
WHERE j.idempotency_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM idempotency_keys AS k
    WHERE k.principal = j.principal AND k.idempotency_key = j.idempotency_key)
ORDER BY j.principal, j.idempotency_key, j.id
ON CONFLICT DO NOTHING
RETURNING id, principal, idempotency_key;

-- name: job_insert_batch_uniform
-- job_insert_batch for jobs that differ only in type, payload, priority, group and
-- idempotency key (a producer's usual batch, the SDK's with a key a job): no unique key
-- or dependencies, and one principal, retry limit, lease, run_at and trace context,
-- bound once.
INSERT INTO jobs (id, type, payload, priority, max_retries, lease_seconds, principal,
                  idempotency_key, fingerprint, run_at, scheduled, created_at, updated_at,
                  job_group, traceparent, tracestate)
SELECT j.id, j.type, j.payload, j.priority,
       %(max_retries)s, %(lease_seconds)s, %(principal)s, j.idempotency_key, j.fingerprint,
       %(run_at)s, %(run_at)s::bigint > %(now)s::bigint, %(now)s, %(now)s, j."group",
       %(traceparent)s::text, %(tracestate)s::text
FROM (SELECT nextval('jobs_id_seq') AS id, r.*
      FROM ROWS FROM (json_to_recordset(%(jobs)s::json) AS (
               type text, payload text, priority integer, "group" text,
               idempotency_key text, fingerprint text)) WITH ORDINALITY AS r
      ORDER BY r.ordinality) AS j
WHERE j.idempotency_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM idempotency_keys AS k
    WHERE k.principal = %(principal)s AND k.idempotency_key = j.idempotency_key)
ORDER BY j.idempotency_key, j.id
ON CONFLICT DO NOTHING
RETURNING id, principal, idempotency_key;

-- name: job_by_idempotency_key
-- The job an idempotency key names: the one its request made, or the unique key's
-- holder that settled its request; key_fingerprint is that request's.
(SELECT *, fingerprint AS key_fingerprint FROM jobs
 WHERE principal = %(principal)s AND idempotency_key = %(idempotency_key)s)
UNION ALL
(SELECT jobs.*, k.fingerprint FROM idempotency_keys AS k JOIN jobs ON jobs.id = k.job_id
 WHERE k.principal = %(principal)s AND k.idempotency_key = %(idempotency_key)s)
LIMIT 1;

-- name: idempotency_key_settled
-- A request with an idempotency key that a unique key's holder settled.
INSERT INTO idempotency_keys (principal, idempotency_key, fingerprint, job_id)
VALUES (%(principal)s, %(idempotency_key)s, %(fingerprint)s, %(job_id)s)
ON CONFLICT DO NOTHING
RETURNING job_id;

-- name: job_get
SELECT * FROM jobs WHERE id = %(id)s;

-- name: keys_lock
-- Held to the end of the enqueue's transaction: enqueues of one unique or idempotency
-- key take turns. Keyed by schema and by the key's bucket; the buckets come sorted, and
-- are locked in that order. (The namespace's text is the one nodes of earlier versions
-- lock, so a rolling upgrade keeps the turns.)
SELECT pg_advisory_xact_lock(hashtext('queuelog.unique.' || current_schema()), bucket)
FROM unnest(%(buckets)s::int[]) WITH ORDINALITY AS locks(bucket, position)
ORDER BY position;

-- name: job_unique_holder
-- The active job an enqueue with this unique key meets: a waiting or pending one first
-- (the one a replace updates, even while an older one runs), else the newest running.
-- Locked, so a claim or a finish on another node waits for this enqueue's decision.
SELECT * FROM jobs
WHERE principal = %(principal)s AND type = %(type)s AND unique_key = %(unique_key)s
  AND status IN ('waiting', 'pending', 'running')
ORDER BY status <> 'running' DESC, id DESC
LIMIT 1
FOR UPDATE;

-- name: job_replace
-- A debounce: the waiting or pending holder of a unique key takes a newer enqueue's
-- payload, priority and run_at.
UPDATE jobs
SET payload = %(payload)s, priority = %(priority)s, run_at = %(run_at)s::bigint,
    scheduled = %(run_at)s::bigint > %(now)s::bigint, updated_at = %(now)s::bigint
WHERE id = %(id)s AND status IN ('waiting', 'pending')
RETURNING *;

-- name: job_unique_give_up
-- A running holder gives its unique key up to the new job a replace makes.
UPDATE jobs SET unique_hold = NULL WHERE id = %(id)s AND status = 'running';

-- name: job_list
-- Every job (an admin's view), newest first. Each listing answers a page: of the next
-- %(limit)s + 1 jobs it reads their stored JSON's sizes (payload, result, progress, error)
-- first, and then reads whole only the jobs before the sizes reach %(max_bytes)s (the first
-- always), up to %(limit)s: a page of 500 large jobs held 64 MB. `more` says whether a job
-- it read follows the page's last. octet_length() reads a TOASTed value's size from its
-- pointer: the jobs past the page are never fetched or decompressed.
WITH listed AS (
    SELECT id, octet_length(payload) + coalesce(octet_length(result), 0)
        + coalesce(octet_length(progress), 0) + coalesce(octet_length(error), 0) AS size
    FROM jobs
    WHERE (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(type)s::text IS NULL OR type = %(type)s::text)
      AND (%(idempotency_key)s::text IS NULL OR idempotency_key = %(idempotency_key)s::text)
    ORDER BY id DESC
    LIMIT %(limit)s + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < %(max_bytes)s
ORDER BY jobs.id DESC
LIMIT %(limit)s;

-- name: job_list_by_principal
-- The jobs one producer enqueued, newest first, walking its own index.
-- A page, as job_list reads one.
WITH listed AS (
    SELECT id, octet_length(payload) + coalesce(octet_length(result), 0)
        + coalesce(octet_length(progress), 0) + coalesce(octet_length(error), 0) AS size
    FROM jobs
    WHERE principal = %(principal)s::text
      AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(type)s::text IS NULL OR type = %(type)s::text)
      AND (%(idempotency_key)s::text IS NULL OR idempotency_key = %(idempotency_key)s::text)
    ORDER BY id DESC
    LIMIT %(limit)s + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < %(max_bytes)s
ORDER BY jobs.id DESC
LIMIT %(limit)s;

-- name: job_list_running
-- The running jobs (those one worker holds, with :holder): running jobs are few,
-- whatever the table's size, and their index finds them (job_list, filtering every job
-- newest first, would read the whole table when fewer than :limit run).
-- A page, as job_list reads one.
WITH listed AS (
    SELECT id, octet_length(payload) + coalesce(octet_length(result), 0)
        + coalesce(octet_length(progress), 0) + coalesce(octet_length(error), 0) AS size
    FROM jobs
    WHERE status = 'running' AND (%(holder)s::text IS NULL OR claimed_by = %(holder)s::text)
      AND (%(before_id)s::bigint IS NULL OR id < %(before_id)s::bigint)
      AND (%(status)s::text IS NULL OR status = %(status)s::text)
      AND (%(type)s::text IS NULL OR type = %(type)s::text)
      AND (%(idempotency_key)s::text IS NULL OR idempotency_key = %(idempotency_key)s::text)
    ORDER BY id DESC
    LIMIT %(limit)s + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < %(max_bytes)s
ORDER BY jobs.id DESC
LIMIT %(limit)s;

-- name: job_events
-- A page of a job's history: its events after the event %(after)s (a seek in job_events_job).
-- Every event is written in a transaction that holds its job's row, so one job's event
-- ids are committed in id order: a page after an id never misses one committed later.
SELECT * FROM job_events WHERE job_id = %(job_id)s AND id > %(after)s ORDER BY id
LIMIT %(limit)s;

-- name: event_insert
INSERT INTO job_events (job_id, at, event, from_status, to_status, actor, detail)
VALUES (%(job_id)s, %(at)s, %(event)s, %(from_status)s, %(to_status)s, %(actor)s, %(detail)s);

-- name: event_insert_many
-- Many events in one statement: %(events)s is a JSON array of event_insert's rows.
INSERT INTO job_events (job_id, at, event, from_status, to_status, actor, detail)
SELECT (e.value ->> 'job_id')::bigint, (e.value ->> 'at')::bigint, e.value ->> 'event',
       e.value ->> 'from_status', e.value ->> 'to_status', e.value ->> 'actor',
       e.value ->> 'detail'
FROM json_array_elements(%(events)s::json) WITH ORDINALITY AS e (value, n)
ORDER BY e.n;

-- name: event_insert_each
-- The same event for every job of the JSON array of ids %(ids)s, in its order (a
-- claim's, a batch completion's).
INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
SELECT i.value::bigint, %(at)s, %(event)s, %(from_status)s, %(to_status)s, %(actor)s
FROM json_array_elements_text(%(ids)s::json) WITH ORDINALITY AS i (value, n)
ORDER BY i.n;

-- name: job_claim
-- One statement: the CTE locks the first ready rows of each type of %(types)s in claim
-- order, skipping rows another node's claim has locked, so concurrent claimers never
-- wait on each other and never get the same job, and keeps the first %(limit)s of them
-- (of several types, the others stay locked until the claim commits). Each type's are
-- read from its own ready index: a filter on the ready index, planned from statistics
-- that reckon a type's jobs spread through the queue, read past every job of another
-- type ahead of a rare type's (a whole backlog, at every claim). The update finds the
-- locked rows by id alone: a guard on their status would let the planner look for them
-- among the pending jobs instead, which after a burst into a table the statistics last
-- saw drained means walking the burst at every claim. The lease token is 128 random
-- bits, fresh per claim.
WITH ready AS (
    SELECT r.id FROM unnest(%(types)s::text[]) AS named (type)
    CROSS JOIN LATERAL (
        SELECT id, priority, created_at FROM jobs
        WHERE type = named.type AND status = 'pending' AND NOT scheduled
          AND run_at <= %(now)s::bigint
        ORDER BY priority DESC, created_at, id
        LIMIT %(limit)s
        FOR UPDATE SKIP LOCKED) AS r
    ORDER BY r.priority DESC, r.created_at, r.id
    LIMIT %(limit)s
)
UPDATE jobs
SET status = 'running',
    worker_id = %(worker_id)s,
    claimed_by = %(worker_name)s,
    claimed_at = %(now)s::bigint,
    lease_token = replace(gen_random_uuid()::text, '-', ''),
    lease_expires_at = %(now)s::bigint
        + COALESCE(%(lease_seconds)s::integer, lease_seconds)::bigint * 1000000,
    held_lease_seconds = COALESCE(%(lease_seconds)s::integer, lease_seconds),
    updated_at = %(now)s::bigint
WHERE id = ANY(ARRAY(SELECT id FROM ready))
RETURNING *;

-- name: job_promote_due
-- Scheduled jobs whose run_at has come join the ready index. SKIP LOCKED: rows
-- another node is promoting right now are its to promote; no claim waits here.
UPDATE jobs SET scheduled = false
WHERE id IN (
    SELECT id FROM jobs
    WHERE status = 'pending' AND scheduled AND run_at <= %(now)s::bigint
    FOR UPDATE SKIP LOCKED);

-- name: job_expired_leases
-- SKIP LOCKED: a lease another node is rescuing (or a worker is finishing) right
-- now is left to it; the guarded job_fail decides in any case.
SELECT * FROM jobs
WHERE status = 'running' AND lease_expires_at <= %(now)s::bigint
ORDER BY lease_expires_at
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_release
-- A held job back to pending at run_at (now, or later: a snooze), under the same
-- guard, without spending an attempt: its holder gives it up unrun (beanstalkd's release).
UPDATE jobs
SET status = 'pending', run_at = %(run_at)s::bigint,
    scheduled = %(run_at)s::bigint > %(now)s::bigint, claimed_at = NULL,
    worker_id = NULL, claimed_by = NULL, lease_token = NULL, lease_expires_at = NULL,
    updated_at = %(now)s::bigint
WHERE id = %(id)s AND status = 'running' AND lease_token = %(lease_token)s
  AND claimed_by = %(worker_name)s AND lease_expires_at > %(now)s::bigint
RETURNING *;

-- name: job_heartbeat
-- A heartbeat without progress keeps the last one; without %(lease_seconds)s it renews
-- for the lease last asked for (the claim's, or an earlier heartbeat's), else the type's.
UPDATE jobs
SET lease_expires_at = %(now)s::bigint
        + COALESCE(%(lease_seconds)s::integer, held_lease_seconds, lease_seconds)::bigint
        * 1000000,
    held_lease_seconds = COALESCE(%(lease_seconds)s::integer, held_lease_seconds, lease_seconds),
    progress = COALESCE(%(progress)s::text, progress),
    updated_at = %(now)s::bigint
WHERE id = %(id)s AND status = 'running' AND lease_token = %(lease_token)s
  AND claimed_by = %(worker_name)s AND lease_expires_at > %(now)s::bigint
RETURNING *;

-- name: job_complete
-- Also records the job's 'completed' event and NOTIFYs its id (awaiting reads on
-- every node answer), in the same statement: no round trip of its own for either.
WITH done AS (
    UPDATE jobs
    SET status = 'completed', result = %(result)s::text, lease_token = NULL,
        lease_expires_at = NULL, updated_at = %(now)s::bigint
    WHERE id = %(id)s AND status = 'running' AND lease_token = %(lease_token)s
      AND claimed_by = %(worker_name)s AND lease_expires_at > %(now)s::bigint
    RETURNING *
), recorded AS (
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    SELECT id, %(now)s::bigint, 'completed', 'running', 'completed', %(worker_name)s
    FROM done
)
SELECT done.*, pg_notify('queuelog_finished', current_schema() || ':' || done.id) AS notified
FROM done;

-- name: job_complete_batch
-- job_complete for every item of the JSON array %(items)s ({id, lease_token,
-- worker_name, result}), each under its own guard, in one statement; with their
-- 'completed' events, and a NOTIFY of their ids per 200 (a notification's payload
-- holds under 8,000 bytes). The count of notifications is joined in so that every
-- one of them is sent (PostgreSQL runs a SELECT in WITH only as far as it is read).
-- It returns what the transaction needs of each job, not the whole row: a worker's
-- acknowledgement asks for no job back, and reading every column of every job cost
-- the server about a seventh of its CPU in a burn-down (job_get_many reads the jobs
-- when they are asked for).
WITH done AS (
    UPDATE jobs
    SET status = 'completed', result = i.value ->> 'result', lease_token = NULL,
        lease_expires_at = NULL, updated_at = %(now)s
    FROM json_array_elements(%(items)s::json) AS i (value)
    WHERE jobs.id = (i.value ->> 'id')::bigint AND jobs.status = 'running'
      AND jobs.lease_token = i.value ->> 'lease_token'
      AND jobs.claimed_by = i.value ->> 'worker_name' AND jobs.lease_expires_at > %(now)s
    RETURNING jobs.id, jobs.type, jobs.status, jobs.has_dependents, jobs.claimed_by
), recorded AS (
    INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
    SELECT id, %(now)s, 'completed', 'running', 'completed', claimed_by
    FROM done ORDER BY id
), notified AS (
    SELECT pg_notify('queuelog_finished', current_schema() || ':' || string_agg(id::text, ','))
    FROM (SELECT id, (row_number() OVER (ORDER BY id) - 1) / 200 AS chunk FROM done) AS c
    GROUP BY chunk
)
SELECT done.id, done.type, done.status, done.has_dependents
FROM done CROSS JOIN (SELECT count(*) FROM notified) AS sent;

-- name: job_fail
-- Retry while attempts remain and the error is retryable; else fail for good,
-- leaving retry_count as it was. A lease past its deadline is no longer held
-- (the expired flag is set only by the rescue of such leases).
UPDATE jobs
SET status = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                  THEN 'pending' ELSE 'failed' END,
    retry_count = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                       THEN retry_count + 1 ELSE retry_count END,
    run_at = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                  THEN %(retry_at)s::bigint ELSE run_at END,
    scheduled = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                     THEN %(retry_at)s::bigint > %(now)s::bigint ELSE false END,
    claimed_at = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                      THEN NULL ELSE claimed_at END,
    worker_id = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                     THEN NULL ELSE worker_id END,
    claimed_by = CASE WHEN %(retryable)s::boolean AND retry_count < max_retries
                      THEN NULL ELSE claimed_by END,
    lease_token = NULL,
    lease_expires_at = NULL,
    error = %(error)s,
    updated_at = %(now)s::bigint
WHERE id = %(id)s AND status = 'running' AND lease_token = %(lease_token)s
  AND claimed_by = %(worker_name)s
  AND (%(expired)s::boolean OR lease_expires_at > %(now)s::bigint)
RETURNING *;

-- name: job_cancel
UPDATE jobs SET status = 'cancelled', updated_at = %(now)s::bigint
WHERE id = %(id)s AND status IN ('waiting', 'pending')
RETURNING *;

-- name: job_requeue
-- A redriven job comes back without holding its unique key (another job may hold it
-- by now); an enqueue with the key still finds it, as a pending job with that key.
-- A job with dependencies waits again until job_recount finds none left.
UPDATE jobs
SET status = CASE WHEN depends_on IS NULL THEN 'pending' ELSE 'waiting' END,
    cancelled_by = NULL, retry_count = 0, run_at = %(now)s::bigint, scheduled = false,
    claimed_at = NULL, worker_id = NULL, claimed_by = NULL, lease_token = NULL,
    lease_expires_at = NULL, unique_hold = NULL, updated_at = %(now)s::bigint
WHERE id = %(id)s AND status IN ('failed', 'cancelled')
RETURNING *;

-- name: job_prunable
-- SKIP LOCKED: pruners on several nodes take disjoint rows. Never a job that a job not
-- completed depends on: an active dependent waits for it or reads it, and a failed or
-- cancelled one may be redriven to wait for it or read it again, until it is pruned
-- itself. A completed dependent never runs again. An enqueue that makes a job depend on
-- this one locks it first (job_dependency_hold), so it is skipped meanwhile.
SELECT id FROM jobs
WHERE status = %(status)s AND status IN ('completed', 'failed', 'cancelled')
  AND updated_at < %(cutoff)s::bigint
  AND NOT (has_dependents AND EXISTS (
      SELECT 1 FROM job_dependencies AS d JOIN jobs AS w ON w.id = d.job_id
      WHERE d.depends_on_id = jobs.id AND w.status <> 'completed'))
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: job_prunable_held
-- job_prunable's jobs that no job not completed depends on, read again once locked:
-- its snapshot was taken before its locks, so it misses a dependent whose enqueue
-- committed (releasing its lock on the job) while the pruner read. This statement's
-- snapshot, taken after the locks, sees it.
SELECT id FROM jobs
WHERE id = ANY(%(ids)s::bigint[])
  AND NOT (has_dependents AND EXISTS (
      SELECT 1 FROM job_dependencies AS d JOIN jobs AS w ON w.id = d.job_id
      WHERE d.depends_on_id = jobs.id AND w.status <> 'completed'));

-- name: job_delete
DELETE FROM jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_events_delete
DELETE FROM job_events WHERE job_id = ANY(%(ids)s::bigint[]);

-- name: job_dependencies_delete
DELETE FROM job_dependencies WHERE job_id = ANY(%(ids)s::bigint[]);

-- name: job_counts
SELECT status, type, count(*) AS n FROM jobs GROUP BY status, type;

-- name: job_oldest_ready
-- Two index seeks: the oldest of the ready set, and of the scheduled jobs now due.
SELECT min(at) AS oldest FROM (
    SELECT min(run_at) AS at FROM jobs WHERE status = 'pending' AND NOT scheduled
    UNION ALL
    SELECT min(run_at) FROM jobs
    WHERE status = 'pending' AND scheduled AND run_at <= %(now)s::bigint) AS candidates;

-- name: job_ready_count
SELECT count(*) AS ready FROM jobs WHERE status = 'pending' AND run_at <= %(now)s::bigint;

-- name: jobs_statistics_stale
-- Whether a fifth of the jobs (at least 1,000) changed since their last ANALYZE, by
-- anyone (autovacuum's own threshold is a tenth, but it looks once a minute, if at all).
SELECT coalesce(bool_or(n_mod_since_analyze >= greatest(1000, n_live_tup / 5)), false)
       AS stale
FROM pg_stat_user_tables WHERE relid = 'jobs'::regclass;

-- name: jobs_analyze
-- SKIP_LOCKED: another ANALYZE or a VACUUM under way holds the table's lock (one that
-- guards against wraparound does not yield); the next pass tries again rather than
-- holding the maintenance pass, and its lease rescues, behind it.
ANALYZE (SKIP_LOCKED) jobs;

-- name: job_next_due
-- When the next scheduled job of %(types)s becomes ready: the earliest run_at of their
-- scheduled jobs (each type's first, which jobs_scheduled_type finds in one seek; the
-- planner may still walk the scheduled jobs instead when its statistics reckon every
-- type alike). One already due, that no claim has made ready yet, answers its time: a
-- long poll whose look came a moment before it looks again at once.
SELECT min((SELECT min(run_at) FROM jobs
            WHERE jobs.type = named.type AND status = 'pending' AND scheduled)) AS next_due
FROM unnest(%(types)s::text[]) AS named(type);

-- name: key_insert
INSERT INTO api_keys (name, roles, max_priority, types, key_hash, prefix, created_at)
VALUES (%(name)s, %(roles)s, %(max_priority)s, %(types)s::text, %(key_hash)s, %(prefix)s,
        %(now)s)
RETURNING *;

-- name: key_by_hash
SELECT * FROM api_keys WHERE key_hash = %(key_hash)s;

-- name: key_list
SELECT * FROM api_keys ORDER BY id;

-- name: key_revoke
UPDATE api_keys SET revoked_at = %(now)s::bigint WHERE id = %(id)s AND revoked_at IS NULL;

-- name: admin_bootstrap_lock
SELECT pg_advisory_xact_lock(hashtext('queuelog.admin'), hashtext(current_schema()));

-- name: key_active_admin
SELECT 1 FROM api_keys
WHERE revoked_at IS NULL AND roles::jsonb @> '["admin"]'::jsonb
LIMIT 1;

-- name: job_event_counts
-- An event that failed its job for good counts as 'failed', whatever its kind (a lease
-- that expired with no attempt left is a 'lease_expired' event).
SELECT (at - %(since)s::bigint) / %(bucket)s::bigint AS bucket,
       CASE WHEN to_status = 'failed' THEN 'failed' ELSE event END AS kind, count(*) AS n
FROM job_events
WHERE at >= %(since)s::bigint AND at < %(until)s::bigint
GROUP BY bucket, kind;

-- name: job_requeue_failed
-- As job_requeue, for the first %(limit)s failed jobs of a type after %(after_id)s in id
-- order: one range of jobs_status_type_id (migration 0015). The pick locks them, and a job
-- another transaction moved meanwhile is read again and left out when no longer failed.
WITH picked AS (
    SELECT id FROM jobs
    WHERE status = 'failed' AND type = %(type)s AND id > %(after_id)s::bigint
    ORDER BY id
    LIMIT %(limit)s
    FOR UPDATE)
UPDATE jobs
SET status = CASE WHEN depends_on IS NULL THEN 'pending' ELSE 'waiting' END,
    cancelled_by = NULL, retry_count = 0, run_at = %(now)s::bigint, scheduled = false,
    claimed_at = NULL, worker_id = NULL, claimed_by = NULL, lease_token = NULL,
    lease_expires_at = NULL, unique_hold = NULL, updated_at = %(now)s::bigint
WHERE id = ANY(ARRAY(SELECT id FROM picked))
RETURNING *;

-- name: ping
SELECT 1 AS ok;

-- name: session_durability
-- What this session's commits wait for, as PostgreSQL reports it (synchronous_commit).
SELECT CASE current_setting('synchronous_commit') WHEN 'off' THEN 'normal' ELSE 'full' END
       AS durability;

-- name: storage_probe
INSERT INTO storage_probe (id, probes) VALUES (1, 1)
ON CONFLICT (id) DO UPDATE SET probes = storage_probe.probes + 1;

-- name: transaction_wrote
-- Whether this transaction has written anything (a transaction id is assigned at
-- its first write), so that its commit proves the database stores again.
SELECT txid_current_if_assigned() IS NOT NULL AS wrote;

-- Schedules (migration 0007). ---------------------------------------------------

-- name: schedule_upsert_config
-- A config schedule takes the file's fields; its pause state stays, and so does its
-- next fire time unless its cadence changed.
INSERT INTO schedules (name, cron, every_seconds, timezone, type, payload, priority, overlap,
                       source, next_run_at, created_at, updated_at)
VALUES (%(name)s, %(cron)s::text, %(every_seconds)s::integer, %(timezone)s, %(type)s,
        %(payload)s, %(priority)s, %(overlap)s, %(source)s, %(next_run_at)s, %(now)s, %(now)s)
ON CONFLICT (name) DO UPDATE
SET next_run_at = CASE WHEN schedules.cron IS DISTINCT FROM excluded.cron
                         OR schedules.every_seconds IS DISTINCT FROM excluded.every_seconds
                         OR schedules.timezone IS DISTINCT FROM excluded.timezone
                       THEN excluded.next_run_at ELSE schedules.next_run_at END,
    cron = excluded.cron, every_seconds = excluded.every_seconds,
    timezone = excluded.timezone, type = excluded.type, payload = excluded.payload,
    priority = excluded.priority, overlap = excluded.overlap, source = excluded.source,
    updated_at = excluded.updated_at;

-- name: schedule_config_names
SELECT name FROM schedules WHERE source = 'config';

-- name: schedule_delete_config
DELETE FROM schedules WHERE name = %(name)s AND source = 'config';

-- name: schedule_insert
INSERT INTO schedules (name, cron, every_seconds, timezone, type, payload, priority, overlap,
                       source, next_run_at, created_at, updated_at)
VALUES (%(name)s, %(cron)s::text, %(every_seconds)s::integer, %(timezone)s, %(type)s,
        %(payload)s, %(priority)s, %(overlap)s, %(source)s, %(next_run_at)s, %(now)s, %(now)s)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: schedule_get
SELECT * FROM schedules WHERE name = %(name)s;

-- name: schedule_hold
-- A trigger holds its schedule before it makes the job: triggers and fires of one
-- schedule then make their jobs in turn, and its last_job_id is the newest.
SELECT * FROM schedules WHERE name = %(name)s FOR NO KEY UPDATE;

-- name: schedule_list
SELECT * FROM schedules ORDER BY name;

-- name: schedule_due
SELECT * FROM schedules
WHERE NOT paused AND next_run_at <= %(now)s
ORDER BY next_run_at;

-- name: schedule_delete
DELETE FROM schedules WHERE name = %(name)s AND source = 'api' RETURNING name;

-- name: schedule_set_paused
-- A schedule already paused, or already running, is left as it is: a resume of a
-- running schedule keeps its fire time (one due, not yet made, still makes its job).
-- A resume's %(next_run_at)s was worked out from the schedule as it read it (updated_at
-- %(seen)s): if another node resumed, fired and paused it since, that fire time may
-- have been made already, so the change waits for a fresh read (no row returned).
UPDATE schedules
SET paused = %(paused)s,
    next_run_at = CASE WHEN paused = %(paused)s THEN next_run_at
                       ELSE COALESCE(%(next_run_at)s::bigint, next_run_at) END,
    updated_at = CASE WHEN paused = %(paused)s THEN updated_at ELSE %(now)s END
WHERE name = %(name)s
  AND (%(seen)s::bigint IS NULL OR paused = %(paused)s OR updated_at = %(seen)s::bigint)
RETURNING *;

-- name: schedule_advance
-- Take one fire: only while next_run_at is still the value the firing node read. A
-- node that fires at once waits for this row's lock, then re-reads the row and
-- finds next_run_at moved on.
UPDATE schedules
SET next_run_at = %(next_run_at)s, last_run_at = %(fire_at)s, updated_at = %(now)s
WHERE name = %(name)s AND next_run_at = %(due)s AND NOT paused
RETURNING *;

-- name: schedule_count_skip
UPDATE schedules SET fires_skipped = fires_skipped + 1 WHERE name = %(name)s;

-- name: schedule_count_made
UPDATE schedules SET last_job_id = %(job_id)s, jobs_made = jobs_made + 1
WHERE name = %(name)s;

-- name: job_mark_schedule
UPDATE jobs SET schedule = %(schedule)s WHERE id = %(id)s RETURNING *;

-- Flow control (storage/flow.py): a claim of limited or paused types, type by type.

-- name: flow_lock
-- Held to the end of the claim's transaction: claims of one limited type, on any
-- node, count and take one after another, so no two both see a free slot. Keyed by
-- schema and type; other types' claims do not wait.
SELECT pg_advisory_xact_lock(hashtext('queuelog.flow.' || current_schema()),
                             hashtext(%(type)s::text));

-- name: type_paused
SELECT type, paused_by, paused_at FROM type_pauses ORDER BY type;

-- name: type_pause
INSERT INTO type_pauses (type, paused_by, paused_at) VALUES (%(type)s, %(actor)s, %(now)s)
ON CONFLICT (type) DO NOTHING
RETURNING type;

-- name: type_resume
DELETE FROM type_pauses WHERE type = %(type)s RETURNING type;

-- name: type_event_insert
INSERT INTO type_events (type, at, event, actor)
VALUES (%(type)s, %(now)s, %(event)s, %(actor)s);

-- name: type_events
SELECT type, at, event, actor FROM type_events WHERE type = %(type)s ORDER BY id;

-- name: type_running
-- A job counts while its lease holds: one that expired while the claim waited for its
-- types' locks (after the claim's rescue) is no longer run, and its holder can no longer
-- end it.
SELECT count(*) AS n FROM jobs
WHERE status = 'running' AND type = %(type)s::text AND lease_expires_at > %(now)s::bigint;

-- name: type_running_groups
SELECT job_group, count(*) AS n FROM jobs
WHERE status = 'running' AND type = %(type)s::text AND job_group IS NOT NULL
  AND lease_expires_at > %(now)s::bigint
GROUP BY job_group;

-- name: type_has_ready
SELECT 1 FROM jobs
WHERE status = 'pending' AND NOT scheduled AND type = %(type)s::text
  AND run_at <= %(now)s::bigint
LIMIT 1;

-- name: ready_of_type
-- SKIP LOCKED: rows another claim has picked are its own (claims of an unlimited type
-- do not take the type's lock).
SELECT id, priority, created_at FROM jobs
WHERE status = 'pending' AND NOT scheduled AND type = %(type)s::text
  AND run_at <= %(now)s::bigint
ORDER BY type, priority DESC, created_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ready_run_of_type
-- The first ready jobs of a group-limited type in claim order, with their groups: the
-- claim takes those whose groups have room (no row locks: job_claim_ids checks each
-- pick is still ready).
SELECT id, priority, created_at, job_group FROM jobs
WHERE status = 'pending' AND NOT scheduled AND type = %(type)s::text
  AND run_at <= %(now)s::bigint
ORDER BY type, priority DESC, created_at, id
LIMIT %(limit)s;

-- name: ready_ungrouped
SELECT id, priority, created_at FROM jobs
WHERE status = 'pending' AND NOT scheduled AND type = %(type)s::text
  AND run_at <= %(now)s::bigint AND job_group IS NULL
ORDER BY type, job_group, priority DESC, created_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ready_of_group
SELECT id, priority, created_at FROM jobs
WHERE status = 'pending' AND NOT scheduled AND job_group IS NOT NULL
  AND type = %(type)s::text AND job_group = %(group)s::text AND run_at <= %(now)s::bigint
ORDER BY type, job_group, priority DESC, created_at, id
LIMIT %(limit)s
FOR UPDATE SKIP LOCKED;

-- name: ready_group_heads
-- The first ready job of every group of a type: each group's first job in claim order
-- found by one seek along the group index from the group before it (never a walk over
-- a group's jobs). The seek that finds a group also finds its first job: a separate
-- lookup of each head by its group was planned, before the table's statistics caught
-- up with a burst of enqueues, as a walk of the type's jobs per group (20,000 groups:
-- 75 s instead of 0.2 s).
WITH RECURSIVE head AS (
    (SELECT id, priority, created_at, job_group FROM jobs
     WHERE status = 'pending' AND NOT scheduled AND job_group IS NOT NULL
       AND type = %(type)s::text AND run_at <= %(now)s::bigint
     ORDER BY type, job_group, priority DESC, created_at, id
     LIMIT 1)
    UNION ALL
    SELECT next_head.* FROM head CROSS JOIN LATERAL (
        SELECT id, priority, created_at, job_group FROM jobs
        WHERE status = 'pending' AND NOT scheduled AND job_group IS NOT NULL
          AND type = %(type)s::text AND run_at <= %(now)s::bigint
          AND job_group > head.job_group
        ORDER BY type, job_group, priority DESC, created_at, id
        LIMIT 1) AS next_head
)
SELECT id, priority, created_at, job_group FROM head;

-- name: job_claim_ids
-- job_claim for the jobs the flow claim picked (by id), under the same guard, ready
-- still: the picks were read without row locks (the type's lock holds claims back, not
-- a replace that has since moved a job's run_at later, nor a cancel). The picks are
-- locked by id first and the guard reads what was locked: a guard beside the ids in
-- the update would let the planner look for them among the pending jobs (see
-- job_claim).
WITH picked AS (
    SELECT id, status, scheduled, run_at FROM jobs
    WHERE id = ANY(%(ids)s::bigint[])
    FOR UPDATE
)
UPDATE jobs
SET status = 'running',
    worker_id = %(worker_id)s,
    claimed_by = %(worker_name)s,
    claimed_at = %(now)s::bigint,
    lease_token = replace(gen_random_uuid()::text, '-', ''),
    lease_expires_at = %(now)s::bigint
        + COALESCE(%(lease_seconds)s::integer, lease_seconds)::bigint * 1000000,
    held_lease_seconds = COALESCE(%(lease_seconds)s::integer, lease_seconds),
    updated_at = %(now)s::bigint
WHERE id = ANY(ARRAY(
    SELECT id FROM picked
    WHERE status = 'pending' AND NOT scheduled AND run_at <= %(now)s::bigint))
RETURNING *;

-- name: type_claims_forget
DELETE FROM type_claims WHERE type = %(type)s AND at <= %(since)s::bigint;

-- name: type_claims_used
SELECT count(*) AS n FROM type_claims WHERE type = %(type)s AND at > %(since)s::bigint;

-- name: type_claims_record
INSERT INTO type_claims (type, at)
SELECT %(type)s, %(now)s::bigint FROM unnest(%(ids)s::bigint[]);

-- name: type_window_opens
-- When the window next has room: the claim that leaves it first, of those that fill it.
SELECT at FROM type_claims WHERE type = %(type)s AND at > %(since)s::bigint
ORDER BY at
LIMIT 1 OFFSET %(over)s;

-- Workflows (migration 0009, storage/workflows.py): jobs that wait for other jobs. ---
-- A recursive statement walks a graph of any depth in one round trip. Each of its steps
-- looks up the dependents of each job it reached in a LATERAL subquery that OFFSET 0
-- keeps apart, and reads each dependent's row by its key: merged into one join, a step
-- is planned from an estimate of how many jobs each level holds, and where statistics
-- miss a burst of waiting or cancelled jobs that plan walked a whole index, or every
-- job of a status, at every level.

-- name: job_get_many
SELECT * FROM jobs WHERE id = ANY(%(ids)s::bigint[]);

-- name: job_list_dependents
-- The jobs that depend on one job, newest first, as the caller may see them: with
-- neither a principal nor a holder, all of them.
-- A page, as job_list reads one.
WITH listed AS (
    SELECT jobs.id, octet_length(jobs.payload) + coalesce(octet_length(jobs.result), 0)
        + coalesce(octet_length(jobs.progress), 0) + coalesce(octet_length(jobs.error), 0) AS size
    FROM job_dependencies AS d JOIN jobs ON jobs.id = d.job_id
    WHERE d.depends_on_id = %(depends_on)s::bigint
      AND ((%(principal)s::text IS NULL AND %(holder)s::text IS NULL)
           OR jobs.principal = %(principal)s::text
           OR (jobs.status = 'running' AND jobs.claimed_by = %(holder)s::text))
      AND (%(before_id)s::bigint IS NULL OR d.job_id < %(before_id)s::bigint)
      AND (%(status)s::text IS NULL OR jobs.status = %(status)s::text)
      AND (%(type)s::text IS NULL OR jobs.type = %(type)s::text)
      AND (%(idempotency_key)s::text IS NULL OR jobs.idempotency_key = %(idempotency_key)s::text)
    ORDER BY d.job_id DESC
    LIMIT %(limit)s + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < %(max_bytes)s
ORDER BY jobs.id DESC
LIMIT %(limit)s;

-- name: job_dependency_hold
-- The dependencies of jobs being made: marked as having dependents (so that their end
-- looks for them), with their status as it is now. The update locks them: a dependency
-- ending on another node waits for this insert to commit, then sees its dependents;
-- one that ended first is read as it ended.
UPDATE jobs SET has_dependents = true WHERE id = ANY(%(ids)s::bigint[])
RETURNING id, status;

-- name: job_dependency_insert
-- %(pairs)s is a JSON array of [job id, dependency id].
INSERT INTO job_dependencies (job_id, depends_on_id)
SELECT (p.value ->> 0)::bigint, (p.value ->> 1)::bigint
FROM json_array_elements(%(pairs)s::json) AS p (value);

-- name: job_settle
-- New waiting jobs take what their insert found of their dependencies: their status
-- (waiting, pending or cancelled), how many are left, their ids.
UPDATE jobs
SET status = s.value ->> 'status', deps_left = (s.value ->> 'deps_left')::integer,
    depends_on = s.value ->> 'depends_on',
    cancelled_by = (s.value ->> 'cancelled_by')::bigint,
    scheduled = jobs.run_at > %(now)s::bigint
FROM json_array_elements(%(jobs)s::json) AS s (value)
WHERE jobs.id = (s.value ->> 'id')::bigint AND jobs.status = 'waiting'
RETURNING jobs.*;

-- name: job_cancel_cascade
-- The waiting jobs (cancel mode) that the end of the jobs of %(ids)s, which failed or
-- were cancelled, cancels: those that depend on one, and in turn those that depend on
-- one of those. Each is read with each of its dependencies (one row each), so that
-- storage/workflows.py finds the level that reaches it first and the dependency it
-- names.
WITH RECURSIVE cascade (id) AS (
    SELECT unnest(%(ids)s::bigint[])
    UNION
    SELECT d.job_id FROM cascade AS c
    CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                        WHERE depends_on_id = c.id OFFSET 0) AS d
    WHERE (SELECT w.status = 'waiting' AND w.on_dependency_failure = 'cancel'
           FROM jobs AS w WHERE w.id = d.job_id))
SELECT d.job_id, d.depends_on_id FROM cascade AS c
CROSS JOIN LATERAL (SELECT job_id, depends_on_id FROM job_dependencies
                    WHERE job_id = c.id OFFSET 0) AS d
WHERE c.id <> ALL(%(ids)s::bigint[]);

-- name: job_cancel_dependents
-- The jobs of job_cancel_cascade, cancelled: %(jobs)s is a JSON array of [job id, the
-- dependency that did it]. job_dependents_hold locked them first.
UPDATE jobs
SET status = 'cancelled', cancelled_by = (c.value ->> 1)::bigint, updated_at = %(now)s::bigint
FROM json_array_elements(%(jobs)s::json) AS c (value)
WHERE jobs.id = (c.value ->> 0)::bigint
  AND jobs.status = 'waiting' AND jobs.on_dependency_failure = 'cancel'
RETURNING jobs.id, jobs.status, jobs.has_dependents, jobs.cancelled_by;

-- name: job_dependents_hold
-- The waiting jobs that the end of the jobs of %(ids)s may change, locked in id order
-- before a failure changes them in several statements (job_cancel_dependents, then
-- job_release_dependents): the cancel-mode jobs its cascade reaches (found as
-- job_cancel_cascade finds them), and every waiting job that depends on an ended or
-- cancelled one. Each statement locking its own rows, a failure would take a cancel
-- join before a run join of a lower id, which a completion takes the other way round.
-- A dependent committed after this statement's snapshot is not locked here, but read
-- by job_cancel_cascade, whose snapshot follows the locks.
WITH RECURSIVE cascade (id) AS (
    SELECT id FROM jobs WHERE id = ANY(%(ids)s::bigint[]) AND status IN ('failed', 'cancelled')
    UNION
    SELECT d.job_id FROM cascade AS c
    CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                        WHERE depends_on_id = c.id OFFSET 0) AS d
    WHERE (SELECT w.status = 'waiting' AND w.on_dependency_failure = 'cancel'
           FROM jobs AS w WHERE w.id = d.job_id)),
ended (id) AS (SELECT unnest(%(ids)s::bigint[]) UNION SELECT id FROM cascade)
SELECT id FROM jobs
WHERE id = ANY(ARRAY(
        SELECT d.job_id FROM ended AS e
        CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                            WHERE depends_on_id = e.id OFFSET 0) AS d
        WHERE (SELECT w.status = 'waiting' FROM jobs AS w WHERE w.id = d.job_id)))
ORDER BY id
FOR NO KEY UPDATE;

-- name: job_release_dependents
-- The waiting jobs that depend on jobs of %(ids)s, which just ended: each counts those
-- off what it still waits for, and is pending once nothing is left, ready from now (its
-- run_at, unless that is later), as a retried or requeued job is. Two endings at once
-- on two nodes take the row's lock in turn, so each counts off the other's. The rows
-- are locked in id order before they are changed: two endings that share dependents
-- would otherwise lock them in the orders their plans read them (by hash, or where
-- each row lies in the table), each holding one the other waits for. A row another
-- ending changed since the statement began is read again as it is now (PostgreSQL
-- rechecks an updated row), so deps_left counts off from the latest count.
WITH e AS MATERIALIZED (
    SELECT d.job_id, count(*) AS n FROM job_dependencies AS d
    WHERE d.depends_on_id = ANY(%(ids)s::bigint[])
    GROUP BY d.job_id),
locked AS MATERIALIZED (
    SELECT jobs.id FROM jobs WHERE jobs.id IN (SELECT job_id FROM e) AND jobs.status = 'waiting'
    ORDER BY jobs.id FOR NO KEY UPDATE)
UPDATE jobs
SET deps_left = jobs.deps_left - e.n,
    status = CASE WHEN jobs.deps_left - e.n <= 0 THEN 'pending' ELSE 'waiting' END,
    run_at = CASE WHEN jobs.deps_left - e.n <= 0 THEN greatest(jobs.run_at, %(now)s::bigint)
                  ELSE jobs.run_at END,
    scheduled = jobs.run_at > %(now)s::bigint,
    updated_at = %(now)s::bigint
FROM e
WHERE jobs.id = e.job_id AND jobs.id IN (SELECT id FROM locked) AND jobs.status = 'waiting'
RETURNING jobs.id, jobs.status;

-- name: job_reinstate_dependents
-- A redrive of jobs of %(ids)s: the jobs their failure cancelled (the candidates), and in
-- turn those that the candidates' cancellation cancelled, however deep, wait again
-- (job_recount then counts what they wait for), unless a dependency of theirs that is
-- no candidate failed or was cancelled (job_cancel_moved), or they wait, in turn, for a
-- candidate kept so (kept spreads through every cancelled dependent: one that is no
-- candidate keeps its own dependents anyway, and no candidate's membership is read at
-- each step). Candidates may wait for each other (c for a and b, b for a): they come
-- back together, in this one statement, however long their chain. As a redriven job
-- (job_requeue), each comes back without holding its unique key: another job may hold
-- it by now.
-- A candidate is reached once, through the dependency its cancelled_by names, so the walk
-- keeps no set of those it met (UNION ALL).
WITH RECURSIVE candidate (id) AS (
    SELECT d.job_id FROM job_dependencies AS d
    WHERE d.depends_on_id = ANY(%(ids)s::bigint[])
      AND (SELECT w.status = 'cancelled' AND w.cancelled_by = d.depends_on_id
           FROM jobs AS w WHERE w.id = d.job_id)
    UNION ALL
    SELECT d.job_id FROM candidate AS c
    CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                        WHERE depends_on_id = c.id OFFSET 0) AS d
    WHERE (SELECT w.status = 'cancelled' AND w.cancelled_by = c.id
           FROM jobs AS w WHERE w.id = d.job_id)),
kept (id) AS (
    SELECT c.id FROM candidate AS c
    CROSS JOIN LATERAL (SELECT depends_on_id FROM job_dependencies
                        WHERE job_id = c.id OFFSET 0) AS d
    WHERE d.depends_on_id NOT IN (SELECT id FROM candidate)
      AND (SELECT dep.status IN ('failed', 'cancelled')
           FROM jobs AS dep WHERE dep.id = d.depends_on_id)
    UNION
    SELECT d.job_id FROM kept
    CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                        WHERE depends_on_id = kept.id OFFSET 0) AS d
    WHERE (SELECT w.status = 'cancelled' FROM jobs AS w WHERE w.id = d.job_id))
UPDATE jobs
SET status = 'waiting', cancelled_by = NULL, unique_hold = NULL, updated_at = %(now)s::bigint
WHERE id = ANY(ARRAY(SELECT id FROM candidate EXCEPT SELECT id FROM kept))
  AND status = 'cancelled'
RETURNING id, status, has_dependents;

-- name: job_rewait_dependents
-- A redrive of jobs of %(ids)s: their dependents in run mode that the jobs' end made pending
-- and that no worker has held yet (no 'claimed' event) wait again, for the jobs to end
-- again (job_recount counts what they wait for). One a worker held, even if it gave it
-- back (a snooze) or it was retried since, may have acted already: it is left alone.
UPDATE jobs SET status = 'waiting', updated_at = %(now)s::bigint
WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on_id = ANY(%(ids)s::bigint[]))
  AND status = 'pending' AND on_dependency_failure = 'run'
  AND NOT EXISTS (SELECT 1 FROM job_events AS e WHERE e.job_id = jobs.id AND e.event = 'claimed')
RETURNING id;

-- name: job_redrive_hold
-- A redrive of jobs of %(ids)s, before it reads how the dependencies of the jobs it may
-- move stand: the redriven jobs, the jobs their failure cancelled however deep (the
-- candidates of job_reinstate_dependents, found as it finds them), and the dependencies
-- that may still change (not completed) of all those and of their waiting or pending
-- run-mode dependents, locked in id order. A dependency that ends or is redriven on
-- another node meanwhile either changed first, and the redrive's next statements read
-- it as it is now, or waits for the redrive to commit and then finds the jobs it moved
-- (cancels a job brought back, counts off its end); an enqueue naming a candidate waits
-- for it likewise.
-- job_reinstate_dependents walks the candidates again, after these locks: this walk read
-- them before it waited for any, and meanwhile a redrive on another node may have made
-- a candidate of a job this one's redrive must bring back (job_cancel_moved naming it).
-- A candidate is reached once, through the dependency its cancelled_by names, so the walk
-- keeps no set of those it met (UNION ALL).
WITH RECURSIVE candidate (id) AS (
    SELECT d.job_id FROM job_dependencies AS d
    WHERE d.depends_on_id = ANY(%(ids)s::bigint[])
      AND (SELECT w.status = 'cancelled' AND w.cancelled_by = d.depends_on_id
           FROM jobs AS w WHERE w.id = d.job_id)
    UNION ALL
    SELECT d.job_id FROM candidate AS c
    CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                        WHERE depends_on_id = c.id OFFSET 0) AS d
    WHERE (SELECT w.status = 'cancelled' AND w.cancelled_by = c.id
           FROM jobs AS w WHERE w.id = d.job_id)),
redriven (id) AS (SELECT unnest(%(ids)s::bigint[]) UNION SELECT id FROM candidate),
moved (id) AS (
    SELECT id FROM redriven
    UNION
    SELECT d.job_id FROM redriven AS r
    CROSS JOIN LATERAL (SELECT job_id FROM job_dependencies
                        WHERE depends_on_id = r.id OFFSET 0) AS d
    WHERE (SELECT w.status = 'waiting' OR (w.status = 'pending' AND w.on_dependency_failure = 'run')
           FROM jobs AS w WHERE w.id = d.job_id))
SELECT id FROM jobs
WHERE id = ANY(ARRAY(
        SELECT id FROM redriven
        UNION
        SELECT d.depends_on_id FROM moved AS m
        CROSS JOIN LATERAL (SELECT depends_on_id FROM job_dependencies
                            WHERE job_id = m.id OFFSET 0) AS d))
  AND status <> 'completed'
ORDER BY id
FOR NO KEY UPDATE;

-- name: job_cancel_moved
-- The jobs a redriven job's failure cancelled that another failed dependency still
-- holds cancelled: now cancelled by that one, whose redrive brings them back.
UPDATE jobs
SET cancelled_by = (
    SELECT min(dep.id) FROM job_dependencies AS d JOIN jobs AS dep ON dep.id = d.depends_on_id
    WHERE d.job_id = jobs.id AND dep.status IN ('failed', 'cancelled'))
WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on_id = ANY(%(ids)s::bigint[]))
  AND status = 'cancelled' AND cancelled_by = ANY(%(ids)s::bigint[]);

-- name: job_waiting_dependents
SELECT DISTINCT d.job_id AS id FROM job_dependencies AS d JOIN jobs ON jobs.id = d.job_id
WHERE d.depends_on_id = ANY(%(ids)s::bigint[]) AND jobs.status = 'waiting';

-- name: job_recount
-- The waiting jobs of %(ids)s count what they still wait for: each dependency not
-- completed, but in run mode one that failed or was cancelled has ended.
UPDATE jobs
SET deps_left = (
    SELECT count(*) FROM job_dependencies AS d JOIN jobs AS dep ON dep.id = d.depends_on_id
    WHERE d.job_id = jobs.id AND dep.status <> 'completed'
      AND (jobs.on_dependency_failure = 'cancel' OR dep.status NOT IN ('failed', 'cancelled')))
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'waiting';

-- name: job_ready_counted
-- The waiting jobs of %(ids)s that wait for nothing more become pending.
UPDATE jobs
SET status = 'pending', run_at = greatest(run_at, %(now)s::bigint),
    scheduled = run_at > %(now)s::bigint, updated_at = %(now)s::bigint
WHERE id = ANY(%(ids)s::bigint[]) AND status = 'waiting' AND deps_left = 0
RETURNING *;
