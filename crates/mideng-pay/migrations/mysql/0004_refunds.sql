-- Refunds. A payment carries the running total of its refunds that are not closed (processing,
-- succeeded, or abnormal and waiting for a person); the database refuses a total above the paid
-- amount, so concurrent refunds can never together exceed it, whatever the application read.
-- One payment per channel trade: a channel's trade number names one of our payments at most (an
-- empty number joins the key as NULL, and NULLs never collide). The ALTER fails if two payments
-- already carry one trade number: a person must look at those before the service starts.
ALTER TABLE pay_payments
    ADD COLUMN refunded BIGINT NOT NULL DEFAULT 0,
    ADD CONSTRAINT pay_payments_refund_within CHECK (refunded >= 0 AND refunded <= amount),
    ADD COLUMN trade_key VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin GENERATED ALWAYS AS (NULLIF(channel_trade_no, '')) STORED,
    ADD UNIQUE KEY pay_payments_one_per_trade (channel, trade_key);

-- A refund's number is its idempotency key at the channel (Alipay out_request_no, WeChat
-- out_refund_no). The client's Idempotency-Key is its business key here: one refund per tenant
-- and key, for as long as the refund exists, whatever became of the key's record.
CREATE TABLE IF NOT EXISTS pay_refunds (
    refund_no         VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id         VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    request_key       VARCHAR(255) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    payment_no        VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_id          VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    channel           VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    amount            BIGINT       NOT NULL CHECK (amount > 0),
    reason            VARCHAR(80)  CHARACTER SET utf8mb4 COLLATE utf8mb4_bin NOT NULL,
    status            VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (status IN ('PROCESSING', 'SUCCESS', 'CLOSED', 'ABNORMAL')),
    channel_refund_no VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    refunded_at       BIGINT       NULL,
    created_at        BIGINT       NOT NULL,
    updated_at        BIGINT       NOT NULL,
    UNIQUE KEY pay_refunds_one_per_key (tenant_id, request_key),
    KEY pay_refunds_payment (payment_no, created_at),
    KEY pay_refunds_by_status (status, created_at)
) ENGINE = InnoDB;
