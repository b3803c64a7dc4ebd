-- mideng token limits (PostgreSQL).
--
-- Every token issue locks this one row first (SELECT ... FOR UPDATE), then counts the unspent
-- tokens of its scope and of the store, then inserts: one step among concurrent issuers on any
-- number of instances, so that the limits (`TokenLimits`) hold whatever the isolation level.
CREATE TABLE IF NOT EXISTS mideng_token_issuer (
    id INTEGER NOT NULL PRIMARY KEY
);
INSERT INTO mideng_token_issuer (id) VALUES (1) ON CONFLICT DO NOTHING;

-- What the store-wide count reads: the unspent tokens, by expiry.
CREATE INDEX IF NOT EXISTS mideng_tokens_unspent ON mideng_tokens (consumed_at, expires_at);
