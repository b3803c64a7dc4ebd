-- mideng payment service tables (MySQL / MariaDB). Times are Unix milliseconds, money is fen.
-- Identifiers use ascii_bin (case-sensitive, as everywhere else). MySQL has no partial indexes:
-- "one PENDING / one PAID payment per order" and "one DEBIT per order" are stored generated
-- flags, 1 in the bound state and NULL otherwise, under unique indexes (a unique index admits
-- any number of NULLs) — the IF(status = 0, order_id, NULL) technique.

CREATE TABLE IF NOT EXISTS pay_tenants (
    tenant_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    api_key_hash CHAR(64)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL UNIQUE,
    created_at   BIGINT      NOT NULL
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_orders (
    tenant_id            VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_id             VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id              VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    amount               BIGINT      NOT NULL CHECK (amount > 0),
    currency             VARCHAR(3)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status               VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    entitlement_sku      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    entitlement_quantity BIGINT      NULL CHECK (entitlement_quantity > 0),
    fingerprint          CHAR(64)    CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    version              BIGINT      NOT NULL DEFAULT 0,
    created_at           BIGINT      NOT NULL,
    updated_at           BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, order_id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_payments (
    payment_no       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_id         VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    channel          VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    amount           BIGINT      NOT NULL CHECK (amount > 0),
    currency         VARCHAR(3)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    status           VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    pay_url          TEXT        NULL,
    expires_at       BIGINT      NOT NULL,
    channel_trade_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    paid_at          BIGINT      NULL,
    created_at       BIGINT      NOT NULL,
    updated_at       BIGINT      NOT NULL,
    pending_flag     TINYINT     GENERATED ALWAYS AS (IF(status = 'PENDING', 1, NULL)) STORED,
    paid_flag        TINYINT     GENERATED ALWAYS AS (IF(status = 'PAID', 1, NULL)) STORED,
    KEY pay_payments_order (tenant_id, order_id),
    UNIQUE KEY pay_payments_one_pending (tenant_id, order_id, pending_flag),
    UNIQUE KEY pay_payments_one_paid (tenant_id, order_id, paid_flag),
    KEY pay_payments_by_status (status, created_at)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_wallets (
    tenant_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    balance    BIGINT      NOT NULL CHECK (balance >= 0),
    currency   VARCHAR(3)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    updated_at BIGINT      NOT NULL,
    PRIMARY KEY (tenant_id, user_id)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_wallet_entries (
    entry_no      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id       VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind          VARCHAR(8)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (kind IN ('CREDIT', 'DEBIT')),
    amount        BIGINT      NOT NULL CHECK (amount > 0),
    reference     VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_id      VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    balance_after BIGINT      NOT NULL CHECK (balance_after >= 0),
    created_at    BIGINT      NOT NULL,
    debit_flag    TINYINT     GENERATED ALWAYS AS (IF(kind = 'DEBIT', 1, NULL)) STORED,
    KEY pay_wallet_entries_wallet (tenant_id, user_id, created_at),
    UNIQUE KEY pay_wallet_one_debit_per_order (tenant_id, user_id, order_id, debit_flag)
) ENGINE = InnoDB;

CREATE TABLE IF NOT EXISTS pay_grants (
    grant_no   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    user_id    VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL UNIQUE,
    order_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    sku        VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    quantity   BIGINT      NOT NULL CHECK (quantity > 0),
    created_at BIGINT      NOT NULL,
    KEY pay_grants_user (tenant_id, user_id)
) ENGINE = InnoDB;
