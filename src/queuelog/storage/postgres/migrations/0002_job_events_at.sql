-- The dashboard counts recent events per minute: find them by time.
CREATE INDEX job_events_at ON job_events (at);
