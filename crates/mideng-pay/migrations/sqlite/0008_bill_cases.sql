-- Bill cases: what a channel's daily bill and our records disagree on — a charge we did not
-- record as PAID, a charge or refund that is not ours, an amount that differs, a PAID payment
-- or a successful refund the bill does not show. One row per (channel, day, kind, number): a
-- second run of the same bill finds the same cases and records none twice. A case is OPEN,
-- REPAIRED (the same flows as a notify settled it, or a later run matched the line) or
-- RESOLVED by a person with a recorded reason.
CREATE TABLE IF NOT EXISTS pay_bill_cases (
    case_id    TEXT PRIMARY KEY,
    channel    TEXT NOT NULL,
    bill_date  TEXT NOT NULL,
    kind       TEXT NOT NULL,
    reference  TEXT NOT NULL,
    tenant_id  TEXT,
    ours       INTEGER,
    billed     INTEGER,
    status     TEXT NOT NULL CHECK (status IN ('OPEN', 'REPAIRED', 'RESOLVED')),
    detail     TEXT NOT NULL,
    resolution TEXT,
    created_at INTEGER NOT NULL,
    updated_at INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS pay_bill_cases_by_tenant ON pay_bill_cases (tenant_id, created_at);
CREATE INDEX IF NOT EXISTS pay_bill_cases_by_status ON pay_bill_cases (status, created_at);

-- What a day's PAID payments and successful refunds are, for the bill's other direction.
CREATE INDEX IF NOT EXISTS pay_payments_paid ON pay_payments (channel, paid_at);
CREATE INDEX IF NOT EXISTS pay_refunds_refunded ON pay_refunds (channel, refunded_at);
