-- The server prices, the page pays. Orders are made with the secret key only, and each carries
-- a client secret: an unguessable value, good until client_secret_expires_at (ms), that the
-- merchant's server hands its checkout page so that the page, with the publishable key, can
-- take a token, pay that one order and read it. A publishable key no longer makes orders, so
-- the mark of an order made by one goes.
ALTER TABLE pay_orders ADD COLUMN client_secret TEXT;
ALTER TABLE pay_orders ADD COLUMN client_secret_expires_at INTEGER;
CREATE UNIQUE INDEX IF NOT EXISTS pay_orders_client_secret ON pay_orders (client_secret);
ALTER TABLE pay_orders DROP COLUMN publishable;
