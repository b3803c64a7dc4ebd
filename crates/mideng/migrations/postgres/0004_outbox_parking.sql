-- mideng outbox parking (PostgreSQL). A row the broker refuses (not one it could not be reached
-- for) counts a refusal; after the relay's `park_after_refusals` it is parked: left out of the
-- relay and the backlog until a person replays it (refusals reset, due at once) or discards it
-- (finished without being sent, `resolution` saying so). Times are Unix milliseconds.
ALTER TABLE mideng_outbox ADD COLUMN IF NOT EXISTS refusals BIGINT NOT NULL DEFAULT 0;
ALTER TABLE mideng_outbox ADD COLUMN IF NOT EXISTS parked_at BIGINT;
ALTER TABLE mideng_outbox ADD COLUMN IF NOT EXISTS resolution VARCHAR(255);
CREATE INDEX IF NOT EXISTS mideng_outbox_parked ON mideng_outbox (parked_at) WHERE parked_at IS NOT NULL AND sent_at IS NULL;
