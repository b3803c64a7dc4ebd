-- mideng lock fences per slot (PostgreSQL). A lock's row lives while it is held (a release
-- deletes it, a purge deletes the expired ones), and its fence comes from one of 1024 slot
-- counters shared by the names that hash to the slot, so what is kept is bounded by the locks
-- held, not by every name ever locked. Each counter starts above every fence given so far.
CREATE INDEX IF NOT EXISTS mideng_locks_held_until ON mideng_locks (held_until);
CREATE TABLE IF NOT EXISTS mideng_lock_fences (
    slot  INTEGER NOT NULL PRIMARY KEY,
    fence BIGINT  NOT NULL
);
INSERT INTO mideng_lock_fences (slot, fence)
SELECT slot, (SELECT COALESCE(MAX(fence), 0) FROM mideng_locks)
FROM generate_series(0, 1023) AS slot
ON CONFLICT (slot) DO NOTHING;
