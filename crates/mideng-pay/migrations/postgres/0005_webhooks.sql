-- Merchant webhooks (Standard Webhooks). An endpoint belongs to a tenant and subscribes to event
-- types; one delivery per endpoint and event (a unique key: the fan-out, written in the event's
-- own transaction, cannot make two); every attempt is kept with its answer.
CREATE TABLE IF NOT EXISTS pay_webhook_endpoints (
    endpoint_id VARCHAR(64)   PRIMARY KEY,
    tenant_id   VARCHAR(64)   NOT NULL,
    url         VARCHAR(2048) NOT NULL,
    events      VARCHAR(256)  NOT NULL,
    secret      VARCHAR(128)  NOT NULL,
    status      VARCHAR(16)   NOT NULL CHECK (status IN ('ENABLED', 'DISABLED')),
    created_at  BIGINT        NOT NULL,
    updated_at  BIGINT        NOT NULL,
    CONSTRAINT pay_webhook_endpoints_one_per_url UNIQUE (tenant_id, url)
);

CREATE TABLE IF NOT EXISTS pay_webhook_deliveries (
    delivery_id     VARCHAR(64)  PRIMARY KEY,
    tenant_id       VARCHAR(64)  NOT NULL,
    endpoint_id     VARCHAR(64)  NOT NULL,
    event_id        VARCHAR(64)  NOT NULL,
    event_type      VARCHAR(32)  NOT NULL,
    payload         TEXT         NOT NULL,
    status          VARCHAR(16)  NOT NULL CHECK (status IN ('PENDING', 'DELIVERED', 'FAILED')),
    step            BIGINT       NOT NULL DEFAULT 0,
    attempts        BIGINT       NOT NULL DEFAULT 0,
    next_attempt_at BIGINT       NOT NULL,
    created_at      BIGINT       NOT NULL,
    updated_at      BIGINT       NOT NULL,
    CONSTRAINT pay_webhook_deliveries_one_per_event UNIQUE (endpoint_id, event_id)
);
CREATE INDEX IF NOT EXISTS pay_webhook_deliveries_due ON pay_webhook_deliveries (status, next_attempt_at);
CREATE INDEX IF NOT EXISTS pay_webhook_deliveries_event ON pay_webhook_deliveries (tenant_id, event_id);

CREATE TABLE IF NOT EXISTS pay_webhook_attempts (
    delivery_id  VARCHAR(64)  NOT NULL,
    attempt      BIGINT       NOT NULL,
    at           BIGINT       NOT NULL,
    status_code  BIGINT,
    error        VARCHAR(256),
    duration_ms  BIGINT       NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
);
