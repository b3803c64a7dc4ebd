-- mideng outbox and in-database queue (SQLite). Times are Unix milliseconds.

CREATE TABLE IF NOT EXISTS mideng_outbox (
    id            TEXT    PRIMARY KEY,
    topic         TEXT    NOT NULL,
    message_key   TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    created_at    INTEGER NOT NULL,
    available_at  INTEGER NOT NULL,
    attempts      INTEGER NOT NULL DEFAULT 0,
    claimed_by    TEXT,
    claimed_until INTEGER NOT NULL DEFAULT 0,
    sent_at       INTEGER,
    last_error    TEXT
);
CREATE INDEX IF NOT EXISTS mideng_outbox_unsent ON mideng_outbox (available_at) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS mideng_outbox_sent_at ON mideng_outbox (sent_at);

CREATE TABLE IF NOT EXISTS mideng_queue (
    id            TEXT    PRIMARY KEY,
    topic         TEXT    NOT NULL,
    message_key   TEXT    NOT NULL,
    payload       BLOB    NOT NULL,
    created_at    INTEGER NOT NULL,
    available_at  INTEGER NOT NULL,
    deliveries    INTEGER NOT NULL DEFAULT 0,
    claimed_by    TEXT,
    claimed_until INTEGER NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS mideng_queue_due ON mideng_queue (topic, available_at);
