-- A claim naming types that finds nothing ready asks when the next of their scheduled
-- jobs is due (job_next_due): each named type's first is one seek here, so a worker of
-- one type never walks the jobs that other types have scheduled.
CREATE INDEX jobs_scheduled_type ON jobs (type, run_at) WHERE status = 'pending' AND scheduled = 1;
