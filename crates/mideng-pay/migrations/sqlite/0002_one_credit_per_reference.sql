-- A credit's business key: one credit per tenant, user and reference, whatever the
-- Idempotency-Key, as a deduct has one debit per tenant, user and order. Creating the index
-- fails if the ledger already holds two credits with one reference: those are double credits,
-- and a person must settle them before the service starts.
CREATE UNIQUE INDEX IF NOT EXISTS pay_wallet_one_credit_per_reference ON pay_wallet_entries (tenant_id, user_id, reference) WHERE kind = 'CREDIT';
