-- mideng toolkit tables (SQLite). Times are Unix milliseconds (INTEGER).

CREATE TABLE IF NOT EXISTS mideng_records (
    tenant           TEXT  NOT NULL,
    operation        TEXT  NOT NULL,
    idempotency_key  TEXT NOT NULL,
    fingerprint      TEXT  NOT NULL,
    state            TEXT  NOT NULL,
    fence            INTEGER      NOT NULL,
    owner            TEXT  NOT NULL,
    lease_until      INTEGER      NOT NULL,
    response_status  INTEGER,
    response_headers TEXT,
    response_body    BLOB,
    created_at       INTEGER      NOT NULL,
    expires_at       INTEGER      NOT NULL,
    PRIMARY KEY (tenant, operation, idempotency_key)
);
CREATE INDEX IF NOT EXISTS mideng_records_expires_at ON mideng_records (expires_at);

CREATE TABLE IF NOT EXISTS mideng_tokens (
    tenant      TEXT  NOT NULL,
    operation   TEXT  NOT NULL,
    token       TEXT NOT NULL,
    expires_at  INTEGER      NOT NULL,
    consumed_at INTEGER,
    PRIMARY KEY (tenant, operation, token)
);
CREATE INDEX IF NOT EXISTS mideng_tokens_expires_at ON mideng_tokens (expires_at);

CREATE TABLE IF NOT EXISTS mideng_locks (
    name       TEXT NOT NULL PRIMARY KEY,
    owner      TEXT  NOT NULL,
    fence      INTEGER      NOT NULL,
    held_until INTEGER      NOT NULL
);

CREATE TABLE IF NOT EXISTS mideng_states (
    kind      TEXT  NOT NULL,
    entity_id TEXT NOT NULL,
    state     TEXT  NOT NULL,
    version   INTEGER      NOT NULL,
    PRIMARY KEY (kind, entity_id)
);
