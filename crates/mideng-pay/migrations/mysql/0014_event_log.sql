-- What happened to each tenant, in order: every event a webhook may carry, written in the
-- transaction of its change beside its outbox row and its deliveries, kept for the webhook
-- retention (`GET /v1/events`), so that a merchant whose endpoint missed messages catches up.
-- The id is the event's (the messages' `webhook-id`); a page is read in (created_at,
-- event_id) order after a cursor (ids compare as bytes: ascii_bin).
CREATE TABLE IF NOT EXISTS pay_event_log (
    event_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    event_type  VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    data        MEDIUMTEXT  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    created_at  BIGINT      NOT NULL,
    KEY pay_event_log_tenant (tenant_id, created_at, event_id),
    KEY pay_event_log_age (created_at)
) ENGINE = InnoDB;
