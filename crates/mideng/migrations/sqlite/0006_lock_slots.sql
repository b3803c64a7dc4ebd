-- mideng lock fences per slot (SQLite). A lock's row lives while it is held (a release deletes
-- it, a purge deletes the expired ones), and its fence comes from one of 1024 slot counters
-- shared by the names that hash to the slot, so what is kept is bounded by the locks held, not
-- by every name ever locked. Each counter starts above every fence given so far.
CREATE INDEX IF NOT EXISTS mideng_locks_held_until ON mideng_locks (held_until);
CREATE TABLE IF NOT EXISTS mideng_lock_fences (
    slot  INTEGER NOT NULL PRIMARY KEY,
    fence INTEGER NOT NULL
);
WITH RECURSIVE slots (slot) AS (SELECT 0 UNION ALL SELECT slot + 1 FROM slots WHERE slot < 1023)
INSERT OR IGNORE INTO mideng_lock_fences (slot, fence)
SELECT slot, (SELECT COALESCE(MAX(fence), 0) FROM mideng_locks) FROM slots;
