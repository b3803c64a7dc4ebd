-- mideng toolkit tables (PostgreSQL). Times are Unix milliseconds (BIGINT).

CREATE TABLE IF NOT EXISTS mideng_records (
    tenant           VARCHAR(64)  NOT NULL,
    operation        VARCHAR(64)  NOT NULL,
    idempotency_key  VARCHAR(255) NOT NULL,
    fingerprint      VARCHAR(64)  NOT NULL,
    state            VARCHAR(16)  NOT NULL,
    fence            BIGINT       NOT NULL,
    owner            VARCHAR(32)  NOT NULL,
    lease_until      BIGINT       NOT NULL,
    response_status  BIGINT,
    response_headers TEXT,
    response_body    BYTEA,
    created_at       BIGINT       NOT NULL,
    expires_at       BIGINT       NOT NULL,
    PRIMARY KEY (tenant, operation, idempotency_key)
);
CREATE INDEX IF NOT EXISTS mideng_records_expires_at ON mideng_records (expires_at);

CREATE TABLE IF NOT EXISTS mideng_tokens (
    tenant      VARCHAR(64)  NOT NULL,
    operation   VARCHAR(64)  NOT NULL,
    token       VARCHAR(255) NOT NULL,
    expires_at  BIGINT       NOT NULL,
    consumed_at BIGINT,
    PRIMARY KEY (tenant, operation, token)
);
CREATE INDEX IF NOT EXISTS mideng_tokens_expires_at ON mideng_tokens (expires_at);

CREATE TABLE IF NOT EXISTS mideng_locks (
    name       VARCHAR(255) NOT NULL PRIMARY KEY,
    owner      VARCHAR(32)  NOT NULL,
    fence      BIGINT       NOT NULL,
    held_until BIGINT       NOT NULL
);

CREATE TABLE IF NOT EXISTS mideng_states (
    kind      VARCHAR(64)  NOT NULL,
    entity_id VARCHAR(255) NOT NULL,
    state     VARCHAR(64)  NOT NULL,
    version   BIGINT       NOT NULL,
    PRIMARY KEY (kind, entity_id)
);
