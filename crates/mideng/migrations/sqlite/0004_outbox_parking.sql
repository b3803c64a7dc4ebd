-- mideng outbox parking (SQLite). A row the broker refuses (not one it could not be reached
-- for) counts a refusal; after the relay's `park_after_refusals` it is parked: left out of the
-- relay and the backlog until a person replays it (refusals reset, due at once) or discards it
-- (finished without being sent, `resolution` saying so). Times are Unix milliseconds.
ALTER TABLE mideng_outbox ADD COLUMN refusals INTEGER NOT NULL DEFAULT 0;
ALTER TABLE mideng_outbox ADD COLUMN parked_at INTEGER;
ALTER TABLE mideng_outbox ADD COLUMN resolution TEXT;
CREATE INDEX IF NOT EXISTS mideng_outbox_parked ON mideng_outbox (parked_at) WHERE parked_at IS NOT NULL AND sent_at IS NULL;
