-- The lease length the holder last asked for (its claim's, or a heartbeat's
-- lease_seconds): a heartbeat without one renews for it. NULL: the job is not held, or
-- was claimed before this column (a heartbeat then renews for the type's lease).
ALTER TABLE jobs ADD COLUMN held_lease_seconds INTEGER;
