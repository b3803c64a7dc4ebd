-- Events a consumer could not process: each failed delivery counted per message, and after
-- the configured number of failures (or at once, for a payload nobody can read) the event is
-- PARKED with its payload and last error, acknowledged to the broker, and left for a person to
-- replay or discard with a recorded reason. A success after failures removes the count. The
-- dedup record of the consumer's effect makes a replay of an event applied meanwhile harmless.
CREATE TABLE IF NOT EXISTS pay_event_failures (
    message_id TEXT PRIMARY KEY,
    consumer   TEXT NOT NULL,
    topic      TEXT NOT NULL,
    payload    BLOB NOT NULL,
    attempts   INTEGER NOT NULL CHECK (attempts > 0),
    last_error TEXT NOT NULL,
    status     TEXT NOT NULL CHECK (status IN ('FAILING', 'PARKED', 'REPLAYED', 'DISCARDED')),
    resolution TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_event_failures_by_status ON pay_event_failures (status, updated_at);
