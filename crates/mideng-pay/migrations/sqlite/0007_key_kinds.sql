-- Two kinds of API key per tenant. The secret key (api_key_hash) opens every route; the
-- publishable key, which a checkout page may show to every visitor, opens only what a checkout
-- does: a token, an order, its payment and that order's state. An order remembers whether a
-- publishable key made it, and a publishable key sees no other order.
ALTER TABLE pay_tenants ADD COLUMN publishable_key_hash TEXT;
CREATE UNIQUE INDEX IF NOT EXISTS pay_tenants_publishable_key ON pay_tenants (publishable_key_hash);
ALTER TABLE pay_orders ADD COLUMN publishable INTEGER NOT NULL DEFAULT 0 CHECK (publishable IN (0, 1));
