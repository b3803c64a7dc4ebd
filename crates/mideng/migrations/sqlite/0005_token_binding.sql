-- mideng token binding (SQLite). A token spent by a request with an idempotency key keeps that
-- key, so that a retry of the same submission (same key, same token) passes while any other
-- use of the token is a duplicate. Kept as long as the token row is (until it expires).
ALTER TABLE mideng_tokens ADD COLUMN consumed_by TEXT;
