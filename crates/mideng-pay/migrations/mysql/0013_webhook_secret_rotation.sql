-- A webhook endpoint's secret rotation: the secret before the last rotation keeps signing
-- beside the new one until `previous_secret_until` (Unix ms), so that a receiver holding
-- either verifies every message during the overlap. NULL: no overlap.
ALTER TABLE pay_webhook_endpoints ADD COLUMN previous_secret VARCHAR(128);
ALTER TABLE pay_webhook_endpoints ADD COLUMN previous_secret_until BIGINT;
