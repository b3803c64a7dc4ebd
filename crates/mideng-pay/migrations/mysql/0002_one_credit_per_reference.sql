-- A credit's business key: one credit per tenant, user and reference, whatever the
-- Idempotency-Key, as a deduct has one debit per tenant, user and order. MySQL and MariaDB have
-- no partial index: a generated flag that is 1 for credits and NULL otherwise joins the unique
-- key, and rows whose flag is NULL never collide. The ALTER fails if the ledger already holds
-- two credits with one reference: those are double credits, and a person must settle them
-- before the service starts.
ALTER TABLE pay_wallet_entries
    ADD COLUMN credit_flag TINYINT GENERATED ALWAYS AS (IF(kind = 'CREDIT', 1, NULL)) STORED,
    ADD UNIQUE KEY pay_wallet_one_credit_per_reference (tenant_id, user_id, reference, credit_flag);
