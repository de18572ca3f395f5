-- A claim naming types that finds nothing ready asks when the next of their scheduled
-- jobs is due (job_next_due): each named type's first is one seek here, so a worker of
-- one type never walks the jobs that other types have scheduled. Building it reads the
-- whole table while holding writes to it back (a tenth of a second for a million
-- finished jobs here): upgrades stop the old servers first in any case.
CREATE INDEX jobs_scheduled_type ON jobs (type, run_at) WHERE status = 'pending' AND scheduled;
