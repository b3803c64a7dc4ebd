-- Events a consumer could not process: each failed delivery counted per message, and after
-- the configured number of failures (or at once, for a payload nobody can read) the event is
-- PARKED with its payload and last error, acknowledged to the broker, and left for a person to
-- replay or discard with a recorded reason. A success after failures removes the count. The
-- dedup record of the consumer's effect makes a replay of an event applied meanwhile harmless.
CREATE TABLE IF NOT EXISTS pay_event_failures (
    message_id VARCHAR(64)  PRIMARY KEY,
    consumer   VARCHAR(32)  NOT NULL,
    topic      VARCHAR(128) NOT NULL,
    payload    BYTEA        NOT NULL,
    attempts   BIGINT       NOT NULL CHECK (attempts > 0),
    last_error VARCHAR(255) NOT NULL,
    status     VARCHAR(16)  NOT NULL CHECK (status IN ('FAILING', 'PARKED', 'REPLAYED', 'DISCARDED')),
    resolution VARCHAR(255),
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_event_failures_by_status ON pay_event_failures (status, updated_at);
