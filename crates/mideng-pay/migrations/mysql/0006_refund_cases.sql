-- Refund cases: money the channel took that this service will not keep — a payment PAID after
-- its order was canceled, a charge for an order another payment had paid already, a charge for
-- an attempt that failed at creation. One case per
-- payment (the primary key), recorded in the transaction that finds it; the automatic refund
-- worker turns each into one refund (request key auto-<payment_no>), or a person does.
CREATE TABLE IF NOT EXISTS pay_refund_cases (
    payment_no VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL PRIMARY KEY,
    tenant_id  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    order_id   VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NOT NULL,
    kind       VARCHAR(32) CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (kind IN ('PAID_AFTER_CANCEL', 'DOUBLE_CHARGE', 'FAILED_ATTEMPT_CHARGED')),
    amount     BIGINT      NOT NULL CHECK (amount > 0),
    status     VARCHAR(16) CHARACTER SET ascii COLLATE ascii_bin NOT NULL CHECK (status IN ('OPEN', 'REFUND_ASKED')),
    refund_no  VARCHAR(64) CHARACTER SET ascii COLLATE ascii_bin NULL,
    created_at BIGINT      NOT NULL,
    updated_at BIGINT      NOT NULL,
    KEY pay_refund_cases_open (status, created_at)
) ENGINE = InnoDB;

-- A grant revoked when its payment was refunded in full (the revocation consumer, when on):
-- set once, by compare-and-set on a NULL.
ALTER TABLE pay_grants ADD COLUMN revoked_at BIGINT NULL;
