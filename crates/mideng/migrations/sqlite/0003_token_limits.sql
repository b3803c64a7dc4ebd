-- mideng token limits (SQLite).
--
-- Every token issue reads this one row first, then counts the unspent tokens of its scope and
-- of the store, then inserts, in one `BEGIN IMMEDIATE` transaction: SQLite serialises writers,
-- so the row is there for the other dialects' sake (they lock it) and the statements stay one.
CREATE TABLE IF NOT EXISTS mideng_token_issuer (
    id INTEGER NOT NULL PRIMARY KEY
);
INSERT OR IGNORE INTO mideng_token_issuer (id) VALUES (1);

-- What the store-wide count reads: the unspent tokens, by expiry.
CREATE INDEX IF NOT EXISTS mideng_tokens_unspent ON mideng_tokens (consumed_at, expires_at);
