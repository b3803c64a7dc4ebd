-- Bill cases: what a channel's daily bill and our records disagree on — a charge we did not
-- record as PAID, a charge or refund that is not ours, an amount that differs, a PAID payment
-- or a successful refund the bill does not show. One row per (channel, day, kind, number): a
-- second run of the same bill finds the same cases and records none twice. A case is OPEN,
-- REPAIRED (the same flows as a notify settled it, or a later run matched the line) or
-- RESOLVED by a person with a recorded reason.
CREATE TABLE IF NOT EXISTS pay_bill_cases (
    case_id    VARCHAR(160) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    channel    VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    bill_date  VARCHAR(10)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind       VARCHAR(32)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    reference  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    tenant_id  VARCHAR(64)  CHARACTER SET ascii COLLATE ascii_bin NULL,
    ours       BIGINT       NULL,
    billed     BIGINT       NULL,
    status     VARCHAR(16)  CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (status IN ('OPEN', 'REPAIRED', 'RESOLVED')),
    detail     VARCHAR(255) CHARACTER SET utf8mb4 NOT NULL,
    resolution VARCHAR(255) CHARACTER SET utf8mb4 NULL,
    created_at BIGINT       NOT NULL,
    updated_at BIGINT       NOT NULL,
    KEY pay_bill_cases_by_tenant (tenant_id, created_at),
    KEY pay_bill_cases_by_status (status, created_at)
) ENGINE = InnoDB;

-- What a day's PAID payments and successful refunds are, for the bill's other direction.
ALTER TABLE pay_payments ADD KEY pay_payments_paid (channel, paid_at);
ALTER TABLE pay_refunds ADD KEY pay_refunds_refunded (channel, refunded_at);
