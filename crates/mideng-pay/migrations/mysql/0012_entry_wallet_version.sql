-- The wallet's version after the entry's change, written with the entry in its transaction:
-- the ledger's exact order per wallet, whatever the clocks of the instances that wrote it
-- (`created_at` is each instance's own clock). 0: an entry written before this column.
ALTER TABLE pay_wallet_entries ADD COLUMN wallet_version BIGINT NOT NULL DEFAULT 0;
