-- mideng token limits (MySQL / MariaDB).
--
-- Every token issue locks this one row first (SELECT ... FOR UPDATE), then counts the unspent
-- tokens of its scope and of the store, then inserts: one step among concurrent issuers on any
-- number of instances, so that the limits (`TokenLimits`) hold. The counts are consistent reads
-- taken after the lock, so under REPEATABLE READ their snapshot begins after the previous
-- holder's commit.
CREATE TABLE IF NOT EXISTS mideng_token_issuer (
    id INTEGER NOT NULL PRIMARY KEY
) ENGINE = InnoDB;
INSERT IGNORE INTO mideng_token_issuer (id) VALUES (1);

-- What the store-wide count reads: the unspent tokens, by expiry.
ALTER TABLE mideng_tokens ADD INDEX mideng_tokens_unspent (consumed_at, expires_at);
