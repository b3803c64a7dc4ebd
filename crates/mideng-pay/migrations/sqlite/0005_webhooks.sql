-- Merchant webhooks (Standard Webhooks). An endpoint belongs to a tenant and subscribes to event
-- types; one delivery per endpoint and event (a unique key: the fan-out, written in the event's
-- own transaction, cannot make two); every attempt is kept with its answer.
CREATE TABLE IF NOT EXISTS pay_webhook_endpoints (
    endpoint_id TEXT   PRIMARY KEY,
    tenant_id   TEXT   NOT NULL,
    url         TEXT NOT NULL,
    events      TEXT  NOT NULL,
    secret      TEXT  NOT NULL,
    status      TEXT   NOT NULL CHECK (status IN ('ENABLED', 'DISABLED')),
    created_at  INTEGER        NOT NULL,
    updated_at  INTEGER        NOT NULL,
    UNIQUE (tenant_id, url)
);

CREATE TABLE IF NOT EXISTS pay_webhook_deliveries (
    delivery_id     TEXT  PRIMARY KEY,
    tenant_id       TEXT  NOT NULL,
    endpoint_id     TEXT  NOT NULL,
    event_id        TEXT  NOT NULL,
    event_type      TEXT  NOT NULL,
    payload         TEXT         NOT NULL,
    status          TEXT  NOT NULL CHECK (status IN ('PENDING', 'DELIVERED', 'FAILED')),
    step            INTEGER      NOT NULL DEFAULT 0,
    attempts        INTEGER      NOT NULL DEFAULT 0,
    next_attempt_at INTEGER       NOT NULL,
    created_at      INTEGER       NOT NULL,
    updated_at      INTEGER       NOT NULL,
    UNIQUE (endpoint_id, event_id)
);
CREATE INDEX IF NOT EXISTS pay_webhook_deliveries_due ON pay_webhook_deliveries (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS pay_webhook_deliveries_event ON pay_webhook_deliveries (tenant_id, event_id);

CREATE TABLE IF NOT EXISTS pay_webhook_attempts (
    delivery_id  TEXT  NOT NULL,
    attempt      INTEGER      NOT NULL,
    at           INTEGER       NOT NULL,
    status_code  INTEGER,
    error        TEXT,
    duration_ms  INTEGER       NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
