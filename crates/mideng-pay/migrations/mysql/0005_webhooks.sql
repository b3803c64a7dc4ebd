-- Merchant webhooks (Standard Webhooks). An endpoint belongs to a tenant and subscribes to event
-- types; one delivery per endpoint and event (a unique key: the fan-out, written in the event's
-- own transaction, cannot make two); every attempt is kept with its answer. An endpoint's URL is
-- unique per tenant through its SHA-256 (an index cannot take 2048 bytes).
CREATE TABLE IF NOT EXISTS pay_webhook_endpoints (
    endpoint_id VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id   VARCHAR(64)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    url         VARCHAR(2048) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    url_sha256  CHAR(64)      CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (SHA2(url, 256)) STORED,
    events      VARCHAR(256)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    secret      VARCHAR(128)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status      VARCHAR(16)   CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (status IN ('ENABLED', 'DISABLED')),
    created_at  BIGINT        NOT NULL,
    updated_at  BIGINT        NOT NULL,
    UNIQUE KEY pay_webhook_endpoints_one_per_url (tenant_id, url_sha256)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_webhook_deliveries (
    delivery_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    endpoint_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    event_id        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    event_type      VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payload         MEDIUMTEXT  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status          VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (status IN ('PENDING', 'DELIVERED', 'FAILED')),
    step            BIGINT      NOT NULL DEFAULT 0,
    attempts        BIGINT      NOT NULL DEFAULT 0,
    next_attempt_at BIGINT      NOT NULL,
    created_at      BIGINT      NOT NULL,
    updated_at      BIGINT      NOT NULL,
    UNIQUE KEY pay_webhook_deliveries_one_per_event (endpoint_id, event_id),
    KEY pay_webhook_deliveries_due (status, next_attempt_at),
    KEY pay_webhook_deliveries_event (tenant_id, event_id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_webhook_attempts (
    delivery_id  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    attempt      BIGINT       NOT NULL,
    at           BIGINT       NOT NULL,
    status_code  BIGINT       NULL,
    error        VARCHAR(256) CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NULL,
    duration_ms  BIGINT       NOT NULL,
    PRIMARY KEY (delivery_id, attempt)
) ENGINE = InnoDB;
