-- One row that readiness rewrites while writes are refused, to learn when the node
-- can store again: a write that changes nothing would commit even on a full disk.
CREATE TABLE storage_probe (
    id INTEGER PRIMARY KEY CHECK (id = 1),
    probes BIGINT NOT NULL
);
