-- The tenant's payments and refunds, listed a page at a time in the order they were created
-- (`GET /v1/payments`, `GET /v1/refunds`): a cursor (created_at, number) read by index.
CREATE INDEX IF NOT EXISTS pay_payments_tenant_time ON pay_payments (tenant_id, created_at, payment_no);
CREATE INDEX IF NOT EXISTS pay_refunds_tenant_time ON pay_refunds (tenant_id, created_at, refund_no);
