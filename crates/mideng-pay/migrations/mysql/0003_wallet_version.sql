-- A wallet's version, bumped by every balance change whatever the wallet strategy, so that the
-- optimistic strategy's compare-and-set sees every write, including those of instances
-- configured with another strategy.
ALTER TABLE pay_wallets ADD COLUMN version BIGINT NOT NULL DEFAULT 0;
