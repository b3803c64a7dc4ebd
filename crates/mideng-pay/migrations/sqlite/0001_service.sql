-- mideng payment service tables (SQLite). Times are Unix milliseconds, money is fen.
-- The invariants of docs/design.md §5 that the database can hold, it holds here: a race the
-- application loses still cannot produce two pending or two paid payments for one order, a
-- negative balance, two debits for one order, or two grants for one payment.

CREATE TABLE IF NOT EXISTS pay_tenants (
    tenant_id    TEXT PRIMARY KEY,
    api_key_hash TEXT NOT NULL UNIQUE,
    created_at   INTEGER      NOT NULL
);

CREATE TABLE IF NOT EXISTS pay_orders (
    tenant_id            TEXT NOT NULL,
    order_id             TEXT NOT NULL,
    user_id              TEXT NOT NULL,
    amount               INTEGER      NOT NULL CHECK (amount > 0),
    currency             TEXT  NOT NULL,
    status               TEXT NOT NULL,
    entitlement_sku      TEXT,
    entitlement_quantity INTEGER     CHECK (entitlement_quantity > 0),
    fingerprint          TEXT NOT NULL,
    version              INTEGER      NOT NULL DEFAULT 0,
    created_at           INTEGER      NOT NULL,
    updated_at           INTEGER      NOT NULL,
    PRIMARY KEY (tenant_id, order_id)
);

CREATE TABLE IF NOT EXISTS pay_payments (
    payment_no       TEXT PRIMARY KEY,
    tenant_id        TEXT NOT NULL,
    order_id         TEXT NOT NULL,
    channel          TEXT NOT NULL,
    amount           INTEGER      NOT NULL CHECK (amount > 0),
    currency         TEXT  NOT NULL,
    status           TEXT NOT NULL,
    pay_url          TEXT,
    expires_at       INTEGER      NOT NULL,
    channel_trade_no TEXT,
    paid_at          INTEGER,
    created_at       INTEGER      NOT NULL,
    updated_at       INTEGER      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_payments_order ON pay_payments (tenant_id, order_id);
CREATE UNIQUE INDEX IF NOT EXISTS pay_payments_one_pending ON pay_payments (tenant_id, order_id) WHERE status = 'PENDING';
CREATE UNIQUE INDEX IF NOT EXISTS pay_payments_one_paid ON pay_payments (tenant_id, order_id) WHERE status = 'PAID';
CREATE INDEX IF NOT EXISTS pay_payments_by_status ON pay_payments (status, created_at);

CREATE TABLE IF NOT EXISTS pay_wallets (
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    balance    INTEGER      NOT NULL CHECK (balance >= 0),
    currency   TEXT  NOT NULL,
    updated_at INTEGER      NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
);

CREATE TABLE IF NOT EXISTS pay_wallet_entries (
    entry_no      TEXT PRIMARY KEY,
    tenant_id     TEXT NOT NULL,
    user_id       TEXT NOT NULL,
    kind          TEXT  NOT NULL CHECK (kind IN ('CREDIT', 'DEBIT')),
    amount        INTEGER      NOT NULL CHECK (amount > 0),
    reference     TEXT NOT NULL,
    order_id      TEXT,
    balance_after INTEGER      NOT NULL CHECK (balance_after >= 0),
    created_at    INTEGER      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_wallet_entries_wallet ON pay_wallet_entries (tenant_id, user_id, created_at);
CREATE UNIQUE INDEX IF NOT EXISTS pay_wallet_one_debit_per_order ON pay_wallet_entries (tenant_id, user_id, order_id) WHERE kind = 'DEBIT';

CREATE TABLE IF NOT EXISTS pay_grants (
    grant_no   TEXT PRIMARY KEY,
    tenant_id  TEXT NOT NULL,
    user_id    TEXT NOT NULL,
    payment_no TEXT NOT NULL UNIQUE,
    order_id   TEXT NOT NULL,
    sku        TEXT NOT NULL,
    quantity   INTEGER     NOT NULL CHECK (quantity > 0),
    created_at INTEGER      NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_grants_user ON pay_grants (tenant_id, user_id);
