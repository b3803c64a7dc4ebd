-- The tenant's payments and refunds, listed a page at a time in the order they were created
-- (`GET /v1/payments`, `GET /v1/refunds`): a cursor (created_at, number) read by index.
ALTER TABLE pay_payments ADD INDEX pay_payments_tenant_time (tenant_id, created_at, payment_no);
ALTER TABLE pay_refunds ADD INDEX pay_refunds_tenant_time (tenant_id, created_at, refund_no);
