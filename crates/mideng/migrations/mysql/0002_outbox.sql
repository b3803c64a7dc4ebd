-- mideng outbox and in-database queue (MySQL / MariaDB). Times are Unix milliseconds.

CREATE TABLE IF NOT EXISTS mideng_outbox (
    id            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    message_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload       MEDIUMBLOB   NOT NULL,
    created_at    BIGINT       NOT NULL,
    available_at  BIGINT       NOT NULL,
    attempts      BIGINT       NOT NULL DEFAULT 0,
    claimed_by    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    claimed_until BIGINT       NOT NULL DEFAULT 0,
    sent_at       BIGINT       NULL,
    last_error    VARCHAR(255) CHARACTER SET utf8mb4 NULL,
    PRIMARY KEY (id),
    KEY mideng_outbox_unsent (sent_at, available_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS mideng_queue (
    id            VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    topic         VARCHAR(128) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    message_key   VARCHAR(255) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    payload       MEDIUMBLOB   NOT NULL,
    created_at    BIGINT       NOT NULL,
    available_at  BIGINT       NOT NULL,
    deliveries    BIGINT       NOT NULL DEFAULT 0,
    claimed_by    VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    claimed_until BIGINT       NOT NULL DEFAULT 0,
    PRIMARY KEY (id),
    KEY mideng_queue_due (topic, available_at)
) ENGINE = InnoDB;
