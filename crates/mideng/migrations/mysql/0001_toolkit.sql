-- mideng toolkit tables (MySQL / MariaDB). Times are Unix milliseconds (BIGINT).
-- Identifiers use ascii_bin: keys are case-sensitive, and a case-insensitive collation would
-- make "Key" and "key" the same record.

CREATE TABLE IF NOT EXISTS mideng_records (
    tenant           VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    operation        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    idempotency_key  VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fingerprint      CHAR(64)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state            VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fence            BIGINT       NOT NULL,
    owner            CHAR(32)     CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    lease_until      BIGINT       NOT NULL,
    response_status  BIGINT       NULL,
    response_headers MEDIUMTEXT   CHARACTER SET utf8mb4 NULL,
    response_body    MEDIUMBLOB   NULL,
    created_at       BIGINT       NOT NULL,
    expires_at       BIGINT       NOT NULL,
    PRIMARY KEY (tenant, operation, idempotency_key),
    KEY mideng_records_expires_at (expires_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS mideng_tokens (
    tenant      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    operation   VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    token       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    expires_at  BIGINT       NOT NULL,
    consumed_at BIGINT       NULL,
    PRIMARY KEY (tenant, operation, token),
    KEY mideng_tokens_expires_at (expires_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS mideng_locks (
    name       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    owner      VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    fence      BIGINT       NOT NULL,
    held_until BIGINT       NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS mideng_states (
    kind      VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    entity_id VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    state     VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    version   BIGINT       NOT NULL,
    PRIMARY KEY (kind, entity_id)
) ENGINE = InnoDB;
