-- The highest fence of the order's lock that a write under that lock carried. A write under
-- the lock raises it to its own fence in its transaction and is refused (rolled back) when it
-- is already higher: a holder paused past its lease, whose lock was taken over and used, cannot
-- write over the next holder's work. 0: no write under the lock yet.
ALTER TABLE pay_orders ADD COLUMN lock_fence BIGINT NOT NULL DEFAULT 0;
