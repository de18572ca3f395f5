-- A redrive of a type's failed jobs moves them a chunk a transaction, in id order
-- (job_requeue_failed): with each row's id after its status and type, the next chunk is
-- one range of the index, as on SQLite, whose index entries end with the row's id.
CREATE INDEX jobs_status_type_id ON jobs (status, type, id);
DROP INDEX jobs_status_type;
