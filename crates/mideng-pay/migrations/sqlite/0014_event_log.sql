-- What happened to each tenant, in order: every event a webhook may carry, written in the
-- transaction of its change beside its outbox row and its deliveries, kept for the webhook
-- retention (`GET /v1/events`), so that a merchant whose endpoint missed messages catches up.
-- The id is the event's (the messages' `webhook-id`); a page is read in (created_at,
-- event_id) order after a cursor.
CREATE TABLE IF NOT EXISTS pay_event_log (
    event_id    VARCHAR(64) PRIMARY KEY,
    tenant_id   VARCHAR(64) NOT NULL,
    event_type  VARCHAR(32) NOT NULL,
    data        TEXT        NOT NULL,
    created_at  INTEGER      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_event_log_tenant ON pay_event_log (tenant_id, created_at, event_id);
CREATE INDEX IF NOT EXISTS pay_event_log_age ON pay_event_log (created_at);
