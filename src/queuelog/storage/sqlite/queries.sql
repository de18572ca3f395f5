-- Named queries for the SQLite backend. Parameters are always bound, never formatted.

-- name: migrations_table
CREATE TABLE IF NOT EXISTS schema_migrations (version INTEGER PRIMARY KEY);

-- name: migrations_done
SELECT version FROM schema_migrations;

-- name: migration_record
INSERT INTO schema_migrations (version) VALUES (:version);

-- name: job_insert_batch
-- Every job of the JSON array :jobs, in its order, in one statement. A job whose
-- (principal, idempotency_key) is taken, by a job or in idempotency_keys, or whose
-- unique key an active job holds (jobs_unique_hold), is skipped. Ids rise in the
-- array's order.
INSERT INTO jobs (type, payload, priority, max_retries, lease_seconds, principal,
                  idempotency_key, fingerprint, run_at, scheduled, created_at, updated_at,
                  unique_key, unique_hold, job_group,
                  traceparent, tracestate, status, on_dependency_failure)
SELECT j.type, j.payload, j.priority, j.max_retries, j.lease_seconds, j.principal,
       j.idempotency_key, j.fingerprint, j.run_at, j.run_at > :now, :now, :now,
       j.unique_key, j.unique_key, j.job_group,
       j.traceparent, j.tracestate, j.status, j.on_dependency_failure
FROM (SELECT e.key AS item, e.value ->> 'type' AS type, e.value ->> 'payload' AS payload,
             e.value ->> 'priority' AS priority, e.value ->> 'max_retries' AS max_retries,
             e.value ->> 'lease_seconds' AS lease_seconds,
             e.value ->> 'principal' AS principal,
             e.value ->> 'idempotency_key' AS idempotency_key,
             e.value ->> 'fingerprint' AS fingerprint, e.value ->> 'run_at' AS run_at,
             e.value ->> 'unique_key' AS unique_key, e.value ->> 'group' AS job_group,
             e.value ->> 'traceparent' AS traceparent,
             e.value ->> 'tracestate' AS tracestate, e.value ->> 'status' AS status,
             e.value ->> 'on_dependency_failure' AS on_dependency_failure
      FROM json_each(:jobs) AS e) AS j
WHERE j.idempotency_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM idempotency_keys AS k
    WHERE k.principal = j.principal AND k.idempotency_key = j.idempotency_key)
ORDER BY j.item
ON CONFLICT DO NOTHING
RETURNING id, principal, idempotency_key;

-- name: job_insert_batch_uniform
-- job_insert_batch for jobs that differ only in type, payload, priority, group and
-- idempotency key (a producer's usual batch, the SDK's with a key a job): no unique key
-- or dependencies, and one principal, retry limit, lease, run_at and trace context,
-- bound once. Each ->> parses the job's JSON object again (SQLite 3.40 keeps no
-- parse, and reads the subquery's column at each use): eight a keyed job here, twenty
-- in job_insert_batch.
INSERT INTO jobs (type, payload, priority, max_retries, lease_seconds, principal,
                  idempotency_key, fingerprint, run_at, scheduled, created_at, updated_at,
                  job_group, traceparent, tracestate)
SELECT j.type, j.payload, j.priority, :max_retries, :lease_seconds, :principal,
       j.idempotency_key, j.fingerprint, :run_at, :run_at > :now, :now, :now, j.job_group,
       :traceparent, :tracestate
FROM (SELECT e.key AS item, e.value ->> 'type' AS type, e.value ->> 'payload' AS payload,
             e.value ->> 'priority' AS priority, e.value ->> 'group' AS job_group,
             e.value ->> 'idempotency_key' AS idempotency_key,
             e.value ->> 'fingerprint' AS fingerprint
      FROM json_each(:jobs) AS e) AS j
WHERE j.idempotency_key IS NULL OR NOT EXISTS (
    SELECT 1 FROM idempotency_keys AS k
    WHERE k.principal = :principal AND k.idempotency_key = j.idempotency_key)
ORDER BY j.item
ON CONFLICT DO NOTHING
RETURNING id, principal, idempotency_key;

-- name: job_by_idempotency_key
-- The job an idempotency key names: the one its request made, or the unique key's
-- holder that settled its request; key_fingerprint is that request's.
SELECT *, fingerprint AS key_fingerprint FROM jobs
WHERE principal = :principal AND idempotency_key = :idempotency_key
UNION ALL
SELECT jobs.*, k.fingerprint FROM idempotency_keys AS k JOIN jobs ON jobs.id = k.job_id
WHERE k.principal = :principal AND k.idempotency_key = :idempotency_key
LIMIT 1;

-- name: idempotency_key_settled
-- A request with an idempotency key that a unique key's holder settled.
INSERT INTO idempotency_keys (principal, idempotency_key, fingerprint, job_id)
VALUES (:principal, :idempotency_key, :fingerprint, :job_id)
ON CONFLICT DO NOTHING
RETURNING job_id;

-- name: job_get
SELECT * FROM jobs WHERE id = :id;

-- name: job_unique_holder
-- The active job an enqueue with this unique key meets: a waiting or pending one first
-- (the one a replace updates, even while an older one runs), else the newest running.
SELECT * FROM jobs INDEXED BY jobs_unique_key
WHERE principal = :principal AND type = :type AND unique_key = :unique_key
  AND unique_key IS NOT NULL AND status IN ('waiting', 'pending', 'running')
ORDER BY status <> 'running' DESC, id DESC
LIMIT 1;

-- name: job_replace
-- A debounce: the waiting or pending holder of a unique key takes a newer enqueue's
-- payload, priority and run_at.
UPDATE jobs
SET payload = :payload, priority = :priority, run_at = :run_at, scheduled = :run_at > :now,
    updated_at = :now
WHERE id = :id AND status IN ('waiting', 'pending')
RETURNING *;

-- name: job_unique_give_up
-- A running holder gives its unique key up to the new job a replace makes.
UPDATE jobs SET unique_hold = NULL WHERE id = :id AND status = 'running';

-- name: job_list
-- Every job (an admin's view), newest first. Each listing answers a page: of the next
-- :limit + 1 jobs it reads their stored JSON's sizes (payload, result, progress, error)
-- first, and then reads whole only the jobs before the sizes reach :max_bytes (the first
-- always), up to :limit: a page of 500 large jobs held 64 MB. `more` says whether a job
-- it read follows the page's last. A text CAST AS BLOB: length() counts its bytes.
WITH listed AS (
    SELECT id, length(CAST(payload AS BLOB)) + ifnull(length(CAST(result AS BLOB)), 0)
        + ifnull(length(CAST(progress AS BLOB)), 0) + ifnull(length(CAST(error AS BLOB)), 0) AS size
    FROM jobs
    WHERE (:before_id IS NULL OR id < :before_id)
      AND (:status IS NULL OR status = :status)
      AND (:type IS NULL OR type = :type)
      AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
    ORDER BY id DESC
    LIMIT :limit + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < :max_bytes
ORDER BY jobs.id DESC
LIMIT :limit;

-- name: job_list_by_principal
-- The jobs one producer enqueued, newest first, walking its own index.
-- A page, as job_list reads one.
WITH listed AS (
    SELECT id, length(CAST(payload AS BLOB)) + ifnull(length(CAST(result AS BLOB)), 0)
        + ifnull(length(CAST(progress AS BLOB)), 0) + ifnull(length(CAST(error AS BLOB)), 0) AS size
    FROM jobs INDEXED BY jobs_principal
    WHERE principal = :principal
      AND (:before_id IS NULL OR id < :before_id)
      AND (:status IS NULL OR status = :status)
      AND (:type IS NULL OR type = :type)
      AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
    ORDER BY id DESC
    LIMIT :limit + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < :max_bytes
ORDER BY jobs.id DESC
LIMIT :limit;

-- name: job_list_running
-- The running jobs (those one worker holds, with :holder): running jobs are few,
-- whatever the table's size, and their index finds them (job_list, filtering every job
-- newest first, would read the whole table when fewer than :limit run).
-- A page, as job_list reads one.
WITH listed AS (
    SELECT id, length(CAST(payload AS BLOB)) + ifnull(length(CAST(result AS BLOB)), 0)
        + ifnull(length(CAST(progress AS BLOB)), 0) + ifnull(length(CAST(error AS BLOB)), 0) AS size
    FROM jobs INDEXED BY jobs_leases
    WHERE status = 'running' AND (:holder IS NULL OR claimed_by = :holder)
      AND (:before_id IS NULL OR id < :before_id)
      AND (:status IS NULL OR status = :status)
      AND (:type IS NULL OR type = :type)
      AND (:idempotency_key IS NULL OR idempotency_key = :idempotency_key)
    ORDER BY id DESC
    LIMIT :limit + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < :max_bytes
ORDER BY jobs.id DESC
LIMIT :limit;

-- name: job_events
-- A page of a job's history: its events after the event :after (a seek in job_events_job).
SELECT * FROM job_events WHERE job_id = :job_id AND id > :after ORDER BY id
LIMIT :limit;

-- name: event_insert
INSERT INTO job_events (job_id, at, event, from_status, to_status, actor, detail)
VALUES (:job_id, :at, :event, :from_status, :to_status, :actor, :detail);

-- name: event_insert_many
-- Many events in one statement: :events is a JSON array of event_insert's rows.
INSERT INTO job_events (job_id, at, event, from_status, to_status, actor, detail)
SELECT e.value ->> 'job_id', e.value ->> 'at', e.value ->> 'event', e.value ->> 'from_status',
       e.value ->> 'to_status', e.value ->> 'actor', e.value ->> 'detail'
FROM json_each(:events) AS e
ORDER BY e.key;

-- name: event_insert_each
-- The same event for every job of the JSON array of ids :ids, in its order (a
-- claim's, a batch completion's): a list of numbers reads much faster than
-- event_insert_many's objects, whose every field is looked up by name.
INSERT INTO job_events (job_id, at, event, from_status, to_status, actor)
SELECT i.value, :at, :event, :from_status, :to_status, :actor
FROM json_each(:ids) AS i
ORDER BY i.key;

-- name: job_claim
-- Lease the first ready jobs of the JSON array :types in claim order. It walks each
-- type's ready index for its first :limit jobs and takes the first :limit of those:
-- jobs of other types ahead in the queue are never read (a filter on the ready index
-- would read past them all). INDEXED BY keeps each pick on its index; the group's
-- transaction holds the write lock, so nothing takes these jobs between the pick and
-- the update. The guard (status = 'pending') keeps the hand-out atomic all the same.
-- The lease token is 128 random bits, fresh per claim.
UPDATE jobs NOT INDEXED
SET status = 'running',
    worker_id = :worker_id,
    claimed_by = :worker_name,
    claimed_at = :now,
    lease_token = lower(hex(randomblob(16))),
    lease_expires_at = :now + COALESCE(:lease_seconds, lease_seconds) * 1000000,
    held_lease_seconds = COALESCE(:lease_seconds, lease_seconds),
    updated_at = :now
WHERE id IN (
    SELECT ready.id FROM json_each(:types) AS named
    JOIN jobs AS ready ON ready.id IN (
        SELECT id FROM jobs INDEXED BY jobs_ready_type
        WHERE status = 'pending' AND scheduled = 0 AND type = named.value
          AND run_at <= :now
        ORDER BY priority DESC, created_at, id
        LIMIT :limit)
    ORDER BY ready.priority DESC, ready.created_at, ready.id
    LIMIT :limit)
  AND status = 'pending'
RETURNING *;

-- name: job_promote_due
-- Scheduled jobs whose run_at has come join the ready index.
UPDATE jobs INDEXED BY jobs_pending_run_at SET scheduled = 0
WHERE status = 'pending' AND scheduled = 1 AND run_at <= :now;

-- name: job_expired_leases
SELECT * FROM jobs INDEXED BY jobs_leases
WHERE status = 'running' AND lease_expires_at <= :now
ORDER BY lease_expires_at
LIMIT :limit;

-- name: job_heartbeat
-- A heartbeat without progress keeps the last one; without :lease_seconds it renews for
-- the lease last asked for (the claim's, or an earlier heartbeat's), else the type's.
UPDATE jobs
SET lease_expires_at = :now + COALESCE(:lease_seconds, held_lease_seconds, lease_seconds) * 1000000,
    held_lease_seconds = COALESCE(:lease_seconds, held_lease_seconds, lease_seconds),
    progress = COALESCE(:progress, progress),
    updated_at = :now
WHERE id = :id AND status = 'running' AND lease_token = :lease_token
  AND claimed_by = :worker_name AND lease_expires_at > :now
RETURNING *;

-- name: job_release
-- A held job back to pending at :run_at (now, or later: a snooze), under the same
-- guard, without spending an attempt: its holder gives it up unrun (beanstalkd's release).
UPDATE jobs
SET status = 'pending', run_at = :run_at, scheduled = :run_at > :now, claimed_at = NULL,
    worker_id = NULL,
    claimed_by = NULL, lease_token = NULL, lease_expires_at = NULL, updated_at = :now
WHERE id = :id AND status = 'running' AND lease_token = :lease_token
  AND claimed_by = :worker_name AND lease_expires_at > :now
RETURNING *;

-- name: job_complete
UPDATE jobs
SET status = 'completed', result = :result, lease_token = NULL, lease_expires_at = NULL,
    updated_at = :now
WHERE id = :id AND status = 'running' AND lease_token = :lease_token
  AND claimed_by = :worker_name AND lease_expires_at > :now
RETURNING *;

-- name: job_complete_batch
-- job_complete for every item of the JSON array :items ({id, lease_token,
-- worker_name, result}), each under its own guard, in one statement. The unary "+"
-- keeps the planner walking the items and finding each job by its id (a status
-- index would scan every running job).
UPDATE jobs
SET status = 'completed', result = i.value ->> 'result', lease_token = NULL,
    lease_expires_at = NULL, updated_at = :now
FROM json_each(:items) AS i
WHERE jobs.id = i.value ->> 'id' AND +jobs.status = 'running'
  AND jobs.lease_token = i.value ->> 'lease_token'
  AND jobs.claimed_by = i.value ->> 'worker_name' AND +jobs.lease_expires_at > :now
RETURNING *;

-- name: job_fail
-- Retry while attempts remain and the error is retryable; else fail for good,
-- leaving retry_count as it was. A lease past its deadline is no longer held
-- (:expired is set only by the rescue of such leases).
UPDATE jobs
SET status = CASE WHEN :retryable AND retry_count < max_retries
                  THEN 'pending' ELSE 'failed' END,
    retry_count = CASE WHEN :retryable AND retry_count < max_retries
                       THEN retry_count + 1 ELSE retry_count END,
    run_at = CASE WHEN :retryable AND retry_count < max_retries
                  THEN :retry_at ELSE run_at END,
    scheduled = CASE WHEN :retryable AND retry_count < max_retries
                     THEN :retry_at > :now ELSE 0 END,
    claimed_at = CASE WHEN :retryable AND retry_count < max_retries
                      THEN NULL ELSE claimed_at END,
    worker_id = CASE WHEN :retryable AND retry_count < max_retries
                     THEN NULL ELSE worker_id END,
    claimed_by = CASE WHEN :retryable AND retry_count < max_retries
                      THEN NULL ELSE claimed_by END,
    lease_token = NULL,
    lease_expires_at = NULL,
    error = :error,
    updated_at = :now
WHERE id = :id AND status = 'running' AND lease_token = :lease_token
  AND claimed_by = :worker_name AND (:expired OR lease_expires_at > :now)
RETURNING *;

-- name: job_cancel
UPDATE jobs SET status = 'cancelled', updated_at = :now
WHERE id = :id AND status IN ('waiting', 'pending')
RETURNING *;

-- name: job_requeue
-- A redriven job comes back without holding its unique key (another job may hold it
-- by now); an enqueue with the key still finds it, as a pending job with that key.
-- A job with dependencies waits again until job_recount finds none left.
UPDATE jobs
SET status = CASE WHEN depends_on IS NULL THEN 'pending' ELSE 'waiting' END,
    cancelled_by = NULL, retry_count = 0, run_at = :now, scheduled = 0, claimed_at = NULL,
    worker_id = NULL, claimed_by = NULL, lease_token = NULL, lease_expires_at = NULL,
    unique_hold = NULL, updated_at = :now
WHERE id = :id AND status IN ('failed', 'cancelled')
RETURNING *;

-- name: job_prunable
-- Never a job that a job not completed depends on: an active dependent waits for it or
-- reads it, and a failed or cancelled one may be redriven to wait for it or read it
-- again, until it is pruned itself (deleting a job deletes its dependencies' rows). A
-- completed dependent never runs again: a chain of completed jobs is pruned at once.
SELECT id FROM jobs INDEXED BY jobs_finished
WHERE status = :status AND status IN ('completed', 'failed', 'cancelled')
  AND updated_at < :cutoff
  AND NOT (has_dependents AND EXISTS (
      SELECT 1 FROM job_dependencies AS d JOIN jobs AS w ON w.id = d.job_id
      WHERE d.depends_on_id = jobs.id AND w.status <> 'completed'))
LIMIT :limit;

-- name: job_delete
DELETE FROM jobs WHERE id = :id;

-- name: job_events_delete
DELETE FROM job_events WHERE job_id = :id;

-- name: job_dependencies_delete
DELETE FROM job_dependencies WHERE job_id = :id;

-- name: job_counts
SELECT status, type, count(*) AS n FROM jobs GROUP BY status, type;

-- name: job_oldest_ready
-- Two index seeks: the oldest of the ready set, and of the scheduled jobs now due.
SELECT min(at) AS oldest FROM (
    SELECT min(run_at) AS at FROM jobs WHERE status = 'pending' AND scheduled = 0
    UNION ALL
    SELECT min(run_at) FROM jobs WHERE status = 'pending' AND scheduled = 1 AND run_at <= :now);

-- name: job_ready_count
SELECT count(*) AS ready FROM jobs WHERE status = 'pending' AND run_at <= :now;

-- name: key_insert
INSERT INTO api_keys (name, roles, max_priority, types, key_hash, prefix, created_at)
VALUES (:name, :roles, :max_priority, :types, :key_hash, :prefix, :now)
RETURNING *;

-- name: key_by_hash
SELECT * FROM api_keys WHERE key_hash = :key_hash;

-- name: key_list
SELECT * FROM api_keys ORDER BY id;

-- name: key_revoke
UPDATE api_keys SET revoked_at = :now WHERE id = :id AND revoked_at IS NULL;

-- name: key_active_admin
SELECT 1 FROM api_keys
WHERE revoked_at IS NULL AND EXISTS (SELECT 1 FROM json_each(roles) WHERE value = 'admin')
LIMIT 1;

-- name: job_next_due
-- When the next scheduled job of the JSON array :types becomes ready: the earliest
-- run_at of their scheduled jobs (each type's first, one seek each; a filter on the
-- scheduled jobs would walk every other type's). One already due, that no claim has made
-- ready yet, answers its time: a long poll whose look came a moment before it looks
-- again at once.
SELECT min((SELECT min(run_at) FROM jobs INDEXED BY jobs_scheduled_type
            WHERE type = named.value AND status = 'pending' AND scheduled = 1)) AS next_due
FROM json_each(:types) AS named;

-- name: job_event_counts
-- An event that failed its job for good counts as 'failed', whatever its kind (a lease
-- that expired with no attempt left is a 'lease_expired' event).
SELECT (at - :since) / :bucket AS bucket,
       CASE WHEN to_status = 'failed' THEN 'failed' ELSE event END AS kind, count(*) AS n
FROM job_events
WHERE at >= :since AND at < :until
GROUP BY bucket, kind;

-- name: job_requeue_failed
-- As job_requeue, for the first :limit failed jobs of a type after :after_id in id order:
-- one range of jobs_status_type, whose entries hold each row's id after its status and type.
UPDATE jobs
SET status = CASE WHEN depends_on IS NULL THEN 'pending' ELSE 'waiting' END,
    cancelled_by = NULL, retry_count = 0, run_at = :now, scheduled = 0, claimed_at = NULL,
    worker_id = NULL, claimed_by = NULL, lease_token = NULL, lease_expires_at = NULL,
    unique_hold = NULL, updated_at = :now
WHERE id IN (
    SELECT id FROM jobs INDEXED BY jobs_status_type
    WHERE status = 'failed' AND type = :type AND id > :after_id
    ORDER BY id LIMIT :limit)
RETURNING *;

-- name: ping
SELECT 1 AS ok;

-- name: session_durability
-- What this connection's commits wait for, as SQLite reports it (PRAGMA synchronous).
SELECT CASE synchronous WHEN 0 THEN 'off' WHEN 1 THEN 'normal' ELSE 'full' END AS durability
FROM pragma_synchronous;

-- name: storage_probe
INSERT INTO storage_probe (id, probes) VALUES (1, 1)
ON CONFLICT (id) DO UPDATE SET probes = storage_probe.probes + 1;

-- Schedules (migration 0007). ---------------------------------------------------

-- name: schedule_upsert_config
-- A config schedule takes the file's fields; its pause state stays, and so does its
-- next fire time unless its cadence changed.
INSERT INTO schedules (name, cron, every_seconds, timezone, type, payload, priority, overlap,
                       source, next_run_at, created_at, updated_at)
VALUES (:name, :cron, :every_seconds, :timezone, :type, :payload, :priority, :overlap,
        :source, :next_run_at, :now, :now)
ON CONFLICT (name) DO UPDATE
SET next_run_at = CASE WHEN schedules.cron IS NOT excluded.cron
                         OR schedules.every_seconds IS NOT excluded.every_seconds
                         OR schedules.timezone IS NOT excluded.timezone
                       THEN excluded.next_run_at ELSE schedules.next_run_at END,
    cron = excluded.cron, every_seconds = excluded.every_seconds,
    timezone = excluded.timezone, type = excluded.type, payload = excluded.payload,
    priority = excluded.priority, overlap = excluded.overlap, source = excluded.source,
    updated_at = excluded.updated_at;

-- name: schedule_config_names
SELECT name FROM schedules WHERE source = 'config';

-- name: schedule_delete_config
DELETE FROM schedules WHERE name = :name AND source = 'config';

-- name: schedule_insert
INSERT INTO schedules (name, cron, every_seconds, timezone, type, payload, priority, overlap,
                       source, next_run_at, created_at, updated_at)
VALUES (:name, :cron, :every_seconds, :timezone, :type, :payload, :priority, :overlap,
        :source, :next_run_at, :now, :now)
ON CONFLICT (name) DO NOTHING
RETURNING *;

-- name: schedule_get
SELECT * FROM schedules WHERE name = :name;

-- name: schedule_hold
-- As schedule_get: the writer's transaction holds the database (PostgreSQL locks the row).
SELECT * FROM schedules WHERE name = :name;

-- name: schedule_list
SELECT * FROM schedules ORDER BY name;

-- name: schedule_due
SELECT * FROM schedules INDEXED BY schedules_due
WHERE paused = 0 AND next_run_at <= :now
ORDER BY next_run_at;

-- name: schedule_delete
DELETE FROM schedules WHERE name = :name AND source = 'api' RETURNING name;

-- name: schedule_set_paused
-- A schedule already paused, or already running, is left as it is: a resume of a
-- running schedule keeps its fire time (one due, not yet made, still makes its job).
-- A resume's :next_run_at was worked out from the schedule as it read it (updated_at
-- :seen): if another request resumed, fired and paused it since, that fire time may
-- have been made already, so the change waits for a fresh read (no row returned).
UPDATE schedules
SET paused = :paused,
    next_run_at = CASE WHEN paused = :paused THEN next_run_at
                       ELSE COALESCE(:next_run_at, next_run_at) END,
    updated_at = CASE WHEN paused = :paused THEN updated_at ELSE :now END
WHERE name = :name AND (:seen IS NULL OR paused = :paused OR updated_at = :seen)
RETURNING *;

-- name: schedule_advance
-- Take one fire: only while next_run_at is still the value the firing node read.
UPDATE schedules
SET next_run_at = :next_run_at, last_run_at = :fire_at, updated_at = :now
WHERE name = :name AND next_run_at = :due AND paused = 0
RETURNING *;

-- name: schedule_count_skip
UPDATE schedules SET fires_skipped = fires_skipped + 1 WHERE name = :name;

-- name: schedule_count_made
UPDATE schedules SET last_job_id = :job_id, jobs_made = jobs_made + 1 WHERE name = :name;

-- name: job_mark_schedule
UPDATE jobs SET schedule = :schedule WHERE id = :id RETURNING *;

-- Flow control (storage/flow.py): a claim of limited or paused types, type by type.

-- name: type_paused
SELECT type, paused_by, paused_at FROM type_pauses ORDER BY type;

-- name: type_pause
INSERT INTO type_pauses (type, paused_by, paused_at) VALUES (:type, :actor, :now)
ON CONFLICT (type) DO NOTHING
RETURNING type;

-- name: type_resume
DELETE FROM type_pauses WHERE type = :type RETURNING type;

-- name: type_event_insert
INSERT INTO type_events (type, at, event, actor) VALUES (:type, :now, :event, :actor);

-- name: type_events
SELECT type, at, event, actor FROM type_events WHERE type = :type ORDER BY id;

-- name: type_running
-- A job counts while its lease holds: one that expired while the claim waited for its
-- turn (after the claim's rescue) is no longer run, and its holder can no longer end it.
SELECT count(*) AS n FROM jobs INDEXED BY jobs_running_group
WHERE status = 'running' AND type = :type AND lease_expires_at > :now;

-- name: type_running_groups
SELECT job_group, count(*) AS n FROM jobs INDEXED BY jobs_running_group
WHERE status = 'running' AND type = :type AND job_group IS NOT NULL
  AND lease_expires_at > :now
GROUP BY job_group;

-- name: type_has_ready
SELECT 1 FROM jobs INDEXED BY jobs_ready_type
WHERE status = 'pending' AND scheduled = 0 AND type = :type AND run_at <= :now
LIMIT 1;

-- name: ready_of_type
SELECT id, priority, created_at FROM jobs INDEXED BY jobs_ready_type
WHERE status = 'pending' AND scheduled = 0 AND type = :type AND run_at <= :now
ORDER BY priority DESC, created_at, id
LIMIT :limit;

-- name: ready_run_of_type
-- The first ready jobs of a group-limited type in claim order, with their groups: the
-- claim takes those whose groups have room.
SELECT id, priority, created_at, job_group FROM jobs INDEXED BY jobs_ready_type
WHERE status = 'pending' AND scheduled = 0 AND type = :type AND run_at <= :now
ORDER BY priority DESC, created_at, id
LIMIT :limit;

-- name: ready_ungrouped
SELECT id, priority, created_at FROM jobs INDEXED BY jobs_ready_group
WHERE status = 'pending' AND scheduled = 0 AND type = :type AND run_at <= :now
  AND job_group IS NULL
ORDER BY priority DESC, created_at, id
LIMIT :limit;

-- name: ready_of_group
SELECT id, priority, created_at FROM jobs INDEXED BY jobs_ready_group
WHERE status = 'pending' AND scheduled = 0 AND job_group IS NOT NULL
  AND type = :type AND job_group = :group AND run_at <= :now
ORDER BY priority DESC, created_at, id
LIMIT :limit;

-- name: ready_group_heads
-- The first ready job of every group of a type: the groups are found by skipping
-- from one to the next along the group index (one seek per group, never a walk over
-- a group's jobs), then each group's first job by one seek.
WITH RECURSIVE grp (name) AS (
    SELECT (SELECT min(job_group) FROM jobs INDEXED BY jobs_ready_group
            WHERE status = 'pending' AND scheduled = 0 AND job_group IS NOT NULL
              AND type = :type)
    UNION ALL
    SELECT (SELECT min(job_group) FROM jobs INDEXED BY jobs_ready_group
            WHERE status = 'pending' AND scheduled = 0 AND job_group IS NOT NULL
              AND type = :type AND job_group > grp.name)
    FROM grp WHERE grp.name IS NOT NULL
)
SELECT j.id, j.priority, j.created_at, j.job_group
FROM grp
JOIN jobs AS j ON j.id = (
    SELECT id FROM jobs INDEXED BY jobs_ready_group
    WHERE status = 'pending' AND scheduled = 0 AND job_group IS NOT NULL
      AND type = :type AND job_group = grp.name AND run_at <= :now
    ORDER BY priority DESC, created_at, id
    LIMIT 1)
WHERE grp.name IS NOT NULL;

-- name: job_claim_ids
-- job_claim for the jobs the flow claim picked (by id), under the same guard.
-- NOT INDEXED keeps the lookup on the ids (rowid seeks): otherwise the planner may
-- walk every pending job by status and test each against the list.
UPDATE jobs NOT INDEXED
SET status = 'running',
    worker_id = :worker_id,
    claimed_by = :worker_name,
    claimed_at = :now,
    lease_token = lower(hex(randomblob(16))),
    lease_expires_at = :now + COALESCE(:lease_seconds, lease_seconds) * 1000000,
    held_lease_seconds = COALESCE(:lease_seconds, lease_seconds),
    updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND status = 'pending'
  AND scheduled = 0 AND run_at <= :now
RETURNING *;

-- name: type_claims_forget
DELETE FROM type_claims WHERE type = :type AND at <= :since;

-- name: type_claims_used
SELECT count(*) AS n FROM type_claims WHERE type = :type AND at > :since;

-- name: type_claims_record
INSERT INTO type_claims (type, at) SELECT :type, :now FROM json_each(:ids);

-- name: type_window_opens
-- When the window next has room: the claim that leaves it first, of those that fill it.
SELECT at FROM type_claims WHERE type = :type AND at > :since
ORDER BY at
LIMIT 1 OFFSET :over;

-- Workflows (migration 0009, storage/workflows.py): jobs that wait for other jobs. ---
-- Each statement finds its jobs by id or through job_dependencies: a unary "+" keeps
-- the planner off the status index, which would walk every waiting or cancelled job.

-- name: job_get_many
SELECT * FROM jobs WHERE id IN (SELECT value FROM json_each(:ids));

-- name: job_list_dependents
-- The jobs that depend on one job, newest first, as the caller may see them: with
-- neither a principal nor a holder, all of them.
-- A page, as job_list reads one.
WITH listed AS (
    SELECT jobs.id, length(CAST(jobs.payload AS BLOB)) + ifnull(length(CAST(jobs.result AS BLOB)), 0)
        + ifnull(length(CAST(jobs.progress AS BLOB)), 0) + ifnull(length(CAST(jobs.error AS BLOB)), 0) AS size
    FROM job_dependencies AS d JOIN jobs ON jobs.id = d.job_id
    WHERE d.depends_on_id = :depends_on
      AND ((:principal IS NULL AND :holder IS NULL) OR jobs.principal = :principal
           OR (jobs.status = 'running' AND jobs.claimed_by = :holder))
      AND (:before_id IS NULL OR d.job_id < :before_id)
      AND (:status IS NULL OR jobs.status = :status)
      AND (:type IS NULL OR jobs.type = :type)
      AND (:idempotency_key IS NULL OR jobs.idempotency_key = :idempotency_key)
    ORDER BY d.job_id DESC
    LIMIT :limit + 1)
SELECT jobs.*, paged.more FROM (
    SELECT id, sum(size) OVER w - size AS before, lead(id) OVER w IS NOT NULL AS more
    FROM listed WINDOW w AS (ORDER BY id DESC ROWS UNBOUNDED PRECEDING)) AS paged
JOIN jobs ON jobs.id = paged.id
WHERE paged.before < :max_bytes
ORDER BY jobs.id DESC
LIMIT :limit;

-- name: job_dependency_hold
-- The dependencies of jobs being made: marked as having dependents (so that their end
-- looks for them), with their status as it is now.
UPDATE jobs SET has_dependents = 1 WHERE id IN (SELECT value FROM json_each(:ids))
RETURNING id, status;

-- name: job_dependency_insert
-- :pairs is a JSON array of [job id, dependency id].
INSERT INTO job_dependencies (job_id, depends_on_id)
SELECT p.value ->> 0, p.value ->> 1 FROM json_each(:pairs) AS p;

-- name: job_settle
-- New waiting jobs take what their insert found of their dependencies: their status
-- (waiting, pending or cancelled), how many are left, their ids.
UPDATE jobs
SET status = s.value ->> 'status', deps_left = s.value ->> 'deps_left',
    depends_on = s.value ->> 'depends_on', cancelled_by = s.value ->> 'cancelled_by',
    scheduled = jobs.run_at > :now
FROM json_each(:jobs) AS s
WHERE jobs.id = s.value ->> 'id' AND +jobs.status = 'waiting'
RETURNING *;

-- name: job_cancel_cascade
-- The waiting jobs (cancel mode) that the end of the jobs of :ids, which failed or were
-- cancelled, cancels: those that depend on one, and in turn those that depend on one of
-- those. Each is read with each of its dependencies (one row each), so that
-- storage/workflows.py finds the level that reaches it first and the dependency it
-- names. Each step finds the next jobs through job_dependencies_dependency and reads
-- each one's row by its key.
WITH RECURSIVE cascade (id) AS (
    SELECT value FROM json_each(:ids)
    UNION
    SELECT d.job_id FROM cascade AS c JOIN job_dependencies AS d ON d.depends_on_id = c.id
    WHERE (SELECT w.status = 'waiting' AND w.on_dependency_failure = 'cancel'
           FROM jobs AS w WHERE w.id = d.job_id))
SELECT d.job_id, d.depends_on_id FROM cascade AS c JOIN job_dependencies AS d ON d.job_id = c.id
WHERE c.id NOT IN (SELECT value FROM json_each(:ids));

-- name: job_cancel_dependents
-- The jobs of job_cancel_cascade, cancelled: :jobs is a JSON array of [job id, the
-- dependency that did it].
UPDATE jobs
SET status = 'cancelled', cancelled_by = c.value ->> 1, updated_at = :now
FROM json_each(:jobs) AS c
WHERE jobs.id = c.value ->> 0
  AND +jobs.status = 'waiting' AND jobs.on_dependency_failure = 'cancel'
RETURNING jobs.id, jobs.status, jobs.has_dependents, jobs.cancelled_by;

-- name: job_release_dependents
-- The waiting jobs that depend on jobs of :ids, which just ended: each counts those off
-- what it still waits for, and is pending once nothing is left, ready from now (its
-- run_at, unless that is later), as a retried or requeued job is.
UPDATE jobs
SET deps_left = jobs.deps_left - e.n,
    status = CASE WHEN jobs.deps_left - e.n <= 0 THEN 'pending' ELSE 'waiting' END,
    run_at = CASE WHEN jobs.deps_left - e.n <= 0 THEN max(jobs.run_at, :now) ELSE jobs.run_at END,
    scheduled = jobs.run_at > :now,
    updated_at = :now
FROM (SELECT d.job_id, count(*) AS n FROM job_dependencies AS d
      WHERE d.depends_on_id IN (SELECT value FROM json_each(:ids))
      GROUP BY d.job_id) AS e
WHERE jobs.id IN (SELECT job_id FROM job_dependencies
                  WHERE depends_on_id IN (SELECT value FROM json_each(:ids)))
  AND jobs.id = e.job_id AND jobs.status = 'waiting'
RETURNING jobs.id, jobs.status;

-- name: job_reinstate_dependents
-- A redrive of jobs of :ids: the jobs their failure cancelled (the candidates), and in
-- turn those that the candidates' cancellation cancelled, however deep, wait again
-- (job_recount then counts what they wait for), unless a dependency of theirs that is
-- no candidate failed or was cancelled (job_cancel_moved), or they wait, in turn, for a
-- candidate kept so (kept spreads through every cancelled dependent: one that is no
-- candidate keeps its own dependents anyway, and no candidate's membership is read at
-- each step). Candidates may wait for each other (c for a and b, b for a): they
-- come back together, in this one statement, however long their chain. As a redriven
-- job (job_requeue), each comes back without holding its unique key: another job may
-- hold it by now. Each job is found through job_dependencies and read by its key.
-- A candidate is reached once, through the dependency its cancelled_by names, so the walk
-- keeps no set of those it met (UNION ALL).
WITH RECURSIVE candidate (id) AS (
    SELECT d.job_id FROM job_dependencies AS d
    WHERE d.depends_on_id IN (SELECT value FROM json_each(:ids))
      AND (SELECT w.status = 'cancelled' AND w.cancelled_by = d.depends_on_id
           FROM jobs AS w WHERE w.id = d.job_id)
    UNION ALL
    SELECT d.job_id FROM candidate AS c JOIN job_dependencies AS d ON d.depends_on_id = c.id
    WHERE (SELECT w.status = 'cancelled' AND w.cancelled_by = d.depends_on_id
           FROM jobs AS w WHERE w.id = d.job_id)),
kept (id) AS (
    SELECT c.id FROM candidate AS c JOIN job_dependencies AS d ON d.job_id = c.id
    WHERE d.depends_on_id NOT IN candidate
      AND (SELECT dep.status IN ('failed', 'cancelled')
           FROM jobs AS dep WHERE dep.id = d.depends_on_id)
    UNION
    SELECT d.job_id FROM kept JOIN job_dependencies AS d ON d.depends_on_id = kept.id
    WHERE (SELECT w.status = 'cancelled' FROM jobs AS w WHERE w.id = d.job_id))
UPDATE jobs
SET status = 'waiting', cancelled_by = NULL, unique_hold = NULL, updated_at = :now
WHERE id IN (SELECT id FROM candidate EXCEPT SELECT id FROM kept)
  AND +status = 'cancelled'
RETURNING id, status, has_dependents;

-- name: job_rewait_dependents
-- A redrive of jobs of :ids: their dependents in run mode that the jobs' end made pending
-- and that no worker has held yet (no 'claimed' event) wait again, for the jobs to end
-- again (job_recount counts what they wait for). One a worker held, even if it gave it
-- back (a snooze) or it was retried since, may have acted already: it is left alone.
UPDATE jobs SET status = 'waiting', updated_at = :now
WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on_id IN (SELECT value FROM json_each(:ids)))
  AND +status = 'pending' AND on_dependency_failure = 'run'
  AND NOT EXISTS (SELECT 1 FROM job_events AS e WHERE e.job_id = jobs.id AND e.event = 'claimed')
RETURNING id;

-- name: job_cancel_moved
-- The jobs a redriven job's failure cancelled that another failed dependency still
-- holds cancelled: now cancelled by that one, whose redrive brings them back.
UPDATE jobs
SET cancelled_by = (
    SELECT min(dep.id) FROM job_dependencies AS d JOIN jobs AS dep ON dep.id = d.depends_on_id
    WHERE d.job_id = jobs.id AND dep.status IN ('failed', 'cancelled'))
WHERE id IN (SELECT job_id FROM job_dependencies WHERE depends_on_id IN (SELECT value FROM json_each(:ids)))
  AND +status = 'cancelled' AND cancelled_by IN (SELECT value FROM json_each(:ids));

-- name: job_waiting_dependents
SELECT DISTINCT d.job_id AS id FROM job_dependencies AS d JOIN jobs ON jobs.id = d.job_id
WHERE d.depends_on_id IN (SELECT value FROM json_each(:ids)) AND +jobs.status = 'waiting';

-- name: job_recount
-- The waiting jobs of :ids count what they still wait for: each dependency not
-- completed, but in run mode one that failed or was cancelled has ended.
UPDATE jobs
SET deps_left = (
    SELECT count(*) FROM job_dependencies AS d JOIN jobs AS dep ON dep.id = d.depends_on_id
    WHERE d.job_id = jobs.id AND dep.status <> 'completed'
      AND (jobs.on_dependency_failure = 'cancel' OR dep.status NOT IN ('failed', 'cancelled')))
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'waiting';

-- name: job_ready_counted
-- The waiting jobs of :ids that wait for nothing more become pending.
UPDATE jobs
SET status = 'pending', run_at = max(run_at, :now), scheduled = run_at > :now, updated_at = :now
WHERE id IN (SELECT value FROM json_each(:ids)) AND +status = 'waiting' AND deps_left = 0
RETURNING *;
