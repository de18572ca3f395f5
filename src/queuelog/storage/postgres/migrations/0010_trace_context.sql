-- The W3C trace context (traceparent, tracestate headers) of the enqueue that made the
-- job, as checked by the API; the worker that claims the job continues its trace.
-- NULL: the enqueue carried none (or a malformed one).
ALTER TABLE jobs ADD COLUMN traceparent TEXT;
ALTER TABLE jobs ADD COLUMN tracestate TEXT;
