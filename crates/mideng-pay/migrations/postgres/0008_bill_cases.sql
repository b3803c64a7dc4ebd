-- Bill cases: what a channel's daily bill and our records disagree on — a charge we did not
-- record as PAID, a charge or refund that is not ours, an amount that differs, a PAID payment
-- or a successful refund the bill does not show. One row per (channel, day, kind, number): a
-- second run of the same bill finds the same cases and records none twice. A case is OPEN,
-- REPAIRED (the same flows as a notify settled it, or a later run matched the line) or
-- RESOLVED by a person with a recorded reason.
CREATE TABLE IF NOT EXISTS pay_bill_cases (
    case_id    VARCHAR(160) PRIMARY KEY,
    channel    VARCHAR(16)  NOT NULL,
    bill_date  VARCHAR(10)  NOT NULL,
    kind       VARCHAR(32)  NOT NULL,
    reference  VARCHAR(64)  NOT NULL,
    tenant_id  VARCHAR(64),
    ours       BIGINT,
    billed     BIGINT,
    status     VARCHAR(16)  NOT NULL CHECK (status IN ('OPEN', 'REPAIRED', 'RESOLVED')),
    detail     VARCHAR(255) NOT NULL,
    resolution VARCHAR(255),
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_bill_cases_by_tenant ON pay_bill_cases (tenant_id, created_at);
CREATE INDEX IF NOT EXISTS pay_bill_cases_by_status ON pay_bill_cases (status, created_at);

-- What a day's PAID payments and successful refunds are, for the bill's other direction.
CREATE INDEX IF NOT EXISTS pay_payments_paid ON pay_payments (channel, paid_at);
CREATE INDEX IF NOT EXISTS pay_refunds_refunded ON pay_refunds (channel, refunded_at);
