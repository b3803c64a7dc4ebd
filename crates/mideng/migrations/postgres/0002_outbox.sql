-- mideng outbox and in-database queue (PostgreSQL). Times are Unix milliseconds.

CREATE TABLE IF NOT EXISTS mideng_outbox (
    id            VARCHAR(64)  PRIMARY KEY,
    topic         VARCHAR(128) NOT NULL,
    message_key   VARCHAR(255) NOT NULL,
    payload       BYTEA        NOT NULL,
    created_at    BIGINT       NOT NULL,
    available_at  BIGINT       NOT NULL,
    attempts      BIGINT       NOT NULL DEFAULT 0,
    claimed_by    VARCHAR(64),
    claimed_until BIGINT       NOT NULL DEFAULT 0,
    sent_at       BIGINT,
    last_error    VARCHAR(255)
);
CREATE INDEX IF NOT EXISTS mideng_outbox_unsent ON mideng_outbox (available_at) WHERE sent_at IS NULL;
CREATE INDEX IF NOT EXISTS mideng_outbox_sent_at ON mideng_outbox (sent_at);

CREATE TABLE IF NOT EXISTS mideng_queue (
    id            VARCHAR(64)  PRIMARY KEY,
    topic         VARCHAR(128) NOT NULL,
    message_key   VARCHAR(255) NOT NULL,
    payload       BYTEA        NOT NULL,
    created_at    BIGINT       NOT NULL,
    available_at  BIGINT       NOT NULL,
    deliveries    BIGINT       NOT NULL DEFAULT 0,
    claimed_by    VARCHAR(64),
    claimed_until BIGINT       NOT NULL DEFAULT 0
);
CREATE INDEX IF NOT EXISTS mideng_queue_due ON mideng_queue (topic, available_at);
