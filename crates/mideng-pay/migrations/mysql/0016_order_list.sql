-- The tenant's orders, listed a page at a time in the order they were created
-- (`GET /v1/orders`): a cursor (created_at, order id) read by index.
ALTER TABLE pay_orders ADD INDEX pay_orders_tenant_time (tenant_id, created_at, order_id);
