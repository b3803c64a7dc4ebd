-- mideng outbox parking (MySQL/MariaDB). A row the broker refuses (not one it could not be
-- reached for) counts a refusal; after the relay's `park_after_refusals` it is parked: left out
-- of the relay and the backlog until a person replays it (refusals reset, due at once) or
-- discards it (finished without being sent, `resolution` saying so). Times are Unix milliseconds.
ALTER TABLE mideng_outbox
    ADD COLUMN refusals BIGINT NOT NULL DEFAULT 0,
    ADD COLUMN parked_at BIGINT NULL,
    ADD COLUMN resolution VARCHAR(255) CHARACTER SET utf8mb4 NULL,
    ADD KEY mideng_outbox_parked (parked_at);
