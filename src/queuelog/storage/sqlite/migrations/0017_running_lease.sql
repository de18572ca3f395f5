-- A claim of a limited type counts the running jobs whose lease still holds
-- (type_running, type_running_groups): with each lease's end in the index, it counts
-- from the index alone, as it did before it looked at the leases.
DROP INDEX jobs_running_group;
CREATE INDEX jobs_running_group ON jobs (type, job_group, lease_expires_at)
    WHERE status = 'running';
