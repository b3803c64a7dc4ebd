-- mideng payment service tables (PostgreSQL). Times are Unix milliseconds, money is fen.
-- The invariants of docs/design.md §5 that the database can hold, it holds here: a race the
-- application loses still cannot produce two pending or two paid payments for one order, a
-- negative balance, two debits for one order, or two grants for one payment.

CREATE TABLE IF NOT EXISTS pay_tenants (
    tenant_id    VARCHAR(64) PRIMARY KEY,
    api_key_hash VARCHAR(64) NOT NULL UNIQUE,
    created_at   BIGINT      NOT NULL
);

CREATE TABLE IF NOT EXISTS pay_orders (
    tenant_id            VARCHAR(64) NOT NULL,
    order_id             VARCHAR(64) NOT NULL,
    user_id              VARCHAR(64) NOT NULL,
    amount               BIGINT      NOT NULL CHECK (amount > 0),
    currency             VARCHAR(3)  NOT NULL,
    status               VARCHAR(16) NOT NULL,
    entitlement_sku      VARCHAR(64),
    entitlement_quantity BIGINT      CHECK (entitlement_quantity > 0),
    fingerprint          VARCHAR(64) NOT NULL,
    version              BIGINT      NOT NULL DEFAULT 0,
    created_at           BIGINT      NOT NULL,
    updated_at           BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, order_id)
);

CREATE TABLE IF NOT EXISTS pay_payments (
    payment_no       VARCHAR(64) PRIMARY KEY,
    tenant_id        VARCHAR(64) NOT NULL,
    order_id         VARCHAR(64) NOT NULL,
    channel          VARCHAR(16) NOT NULL,
    amount           BIGINT      NOT NULL CHECK (amount > 0),
    currency         VARCHAR(3)  NOT NULL,
    status           VARCHAR(16) NOT NULL,
    pay_url          TEXT,
    expires_at       BIGINT      NOT NULL,
    channel_trade_no VARCHAR(64),
    paid_at          BIGINT,
    created_at       BIGINT      NOT NULL,
    updated_at       BIGINT      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_payments_order ON pay_payments (tenant_id, order_id);
CREATE UNIQUE INDEX IF NOT EXISTS pay_payments_one_pending ON pay_payments (tenant_id, order_id) WHERE status = 'PENDING';
CREATE UNIQUE INDEX IF NOT EXISTS pay_payments_one_paid ON pay_payments (tenant_id, order_id) WHERE status = 'PAID';
CREATE INDEX IF NOT EXISTS pay_payments_by_status ON pay_payments (status, created_at);

CREATE TABLE IF NOT EXISTS pay_wallets (
    tenant_id  VARCHAR(64) NOT NULL,
    user_id    VARCHAR(64) NOT NULL,
    balance    BIGINT      NOT NULL CHECK (balance >= 0),
    currency   VARCHAR(3)  NOT NULL,
    updated_at BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);

CREATE TABLE IF NOT EXISTS pay_wallet_entries (
    entry_no      VARCHAR(64) PRIMARY KEY,
    tenant_id     VARCHAR(64) NOT NULL,
    user_id       VARCHAR(64) NOT NULL,
    kind          VARCHAR(8)  NOT NULL CHECK (kind IN ('CREDIT', 'DEBIT')),
    amount        BIGINT      NOT NULL CHECK (amount > 0),
    reference     VARCHAR(64) NOT NULL,
    order_id      VARCHAR(64),
    balance_after BIGINT      NOT NULL CHECK (balance_after >= 0),
    created_at    BIGINT      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_wallet_entries_wallet ON pay_wallet_entries (tenant_id, user_id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS pay_wallet_one_debit_per_order ON pay_wallet_entries (tenant_id, user_id, order_id) WHERE kind = 'DEBIT';

CREATE TABLE IF NOT EXISTS pay_grants (
    grant_no   VARCHAR(64) PRIMARY KEY,
    tenant_id  VARCHAR(64) NOT NULL,
    user_id    VARCHAR(64) NOT NULL,
    payment_no VARCHAR(64) NOT NULL UNIQUE,
    order_id   VARCHAR(64) NOT NULL,
    sku        VARCHAR(64) NOT NULL,
    quantity   BIGINT      NOT NULL CHECK (quantity > 0),
    created_at BIGINT      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_grants_user ON pay_grants (tenant_id, user_id);
