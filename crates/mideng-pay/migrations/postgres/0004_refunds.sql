-- Refunds. A payment carries the running total of its refunds that are not closed (processing,
-- succeeded, or abnormal and waiting for a person); the database refuses a total above the paid
-- amount, so concurrent refunds can never together exceed it, whatever the application read.
ALTER TABLE pay_payments ADD COLUMN IF NOT EXISTS refunded BIGINT NOT NULL DEFAULT 0;
ALTER TABLE pay_payments ADD CONSTRAINT pay_payments_refund_within CHECK (refunded >= 0 AND refunded <= amount);

-- One payment per channel trade: a channel's trade number names one of our payments at most.
-- Creating the index fails if two payments already carry one trade number: a person must look
-- at those before the service starts.
CREATE UNIQUE INDEX IF NOT EXISTS pay_payments_one_per_trade ON pay_payments (channel, channel_trade_no) WHERE channel_trade_no IS NOT NULL AND channel_trade_no <> '';

-- A refund's number is its idempotency key at the channel (Alipay out_request_no, WeChat
-- out_refund_no). The client's Idempotency-Key is its business key here: one refund per tenant
-- and key, for as long as the refund exists, whatever became of the key's record.
CREATE TABLE IF NOT EXISTS pay_refunds (
    refund_no         VARCHAR(64)  PRIMARY KEY,
    tenant_id         VARCHAR(64)  NOT NULL,
    request_key       VARCHAR(255) NOT NULL,
    payment_no        VARCHAR(64)  NOT NULL,
    order_id          VARCHAR(64)  NOT NULL,
    channel           VARCHAR(16)  NOT NULL,
    amount            BIGINT       NOT NULL CHECK (amount > 0),
    reason            VARCHAR(80)  NOT NULL,
    status            VARCHAR(16)  NOT NULL CHECK (status IN ('PROCESSING', 'SUCCESS', 'CLOSED', 'ABNORMAL')),
    channel_refund_no VARCHAR(64),
    refunded_at       BIGINT,
    created_at        BIGINT       NOT NULL,
    updated_at        BIGINT       NOT NULL,
    CONSTRAINT pay_refunds_one_per_key UNIQUE (tenant_id, request_key)
);
CREATE INDEX IF NOT EXISTS pay_refunds_payment ON pay_refunds (payment_no, created_at);
CREATE INDEX IF NOT EXISTS pay_refunds_by_status ON pay_refunds (status, created_at);
