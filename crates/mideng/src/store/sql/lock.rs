//! Fenced locks on SQL ([`LockStore`]).
//!
//! Acquiring runs in one write transaction: insert the lock row doing nothing if it exists,
//! read it under a row lock, and take it (new, or over from a holder whose time ran out) with
//! the next fence of its slot: one of 1024 counters in `mideng_lock_fences` (toolkit migration
//! 6), locked after the lock row and only by acquisitions, so no two transactions wait on each
//! other in opposite orders. A counter only grows, so a name's fences grow although its row is
//! deleted in between, and a holder whose lock was taken over is refused by anything that
//! checks the fence. Release is one conditional delete on the owner and renewal one
//! conditional update, so a holder can never free or extend a lock it lost; rows of holders
//! that never released go with [`LockStore::purge_expired_locks`]. The tables therefore hold
//! the locks held (and not yet purged) and 1024 counters, however many names were locked.

use std::time::Duration;

use async_trait::async_trait;
use sqlx::Database;

use super::engine::{
    Arg, Dialect, SqlConn, SqlRow, SqlStore, as_fence, as_i64, corrupt, store_error, timer,
};
use super::statements::PerDialect;
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::Name;
use crate::latency::op;
use crate::limits::PURGE_BATCH_ROWS_MAX;
use crate::lock::{self, LockGuard, LockStore};
use crate::record::new_owner;

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_locks (name, owner, fence, held_until) VALUES (" ? ", " ? ", 0, " ? ")"
    {
        // Takes the row's exclusive lock at once, as for records (see `record.rs`).
        mysql: " ON DUPLICATE KEY UPDATE fence = fence",
        _: " ON CONFLICT (name) DO NOTHING"
    }
);
const SELECT_LOCKED: PerDialect<&str> = crate::dialect_sql!(
    "SELECT owner, fence, held_until FROM mideng_locks WHERE name = " ? for_update
);
const TAKE: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_locks SET owner = " ? ", fence = " ? ", held_until = " ? " WHERE name = " ?
);
/// The slot's next fence: one more, or the time in microseconds if that is higher
/// ([`lock::next_fence`], [`lock::fence_floor`]).
const NEXT_FENCE: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_lock_fences SET fence = CASE WHEN fence + 1 > " ? " THEN fence + 1 ELSE " ?
    " END WHERE slot = " ?
);
const SLOT_FENCE: PerDialect<&str> =
    crate::dialect_sql!("SELECT fence FROM mideng_lock_fences WHERE slot = "?);
const RELEASE: PerDialect<&str> = crate::dialect_sql!(
    "DELETE FROM mideng_locks WHERE name = " ? " AND owner = " ?
);
/// A bounded delete of the rows whose holders' time ran out, per dialect as for tokens.
const PURGE: PerDialect<&str> = crate::dialect_sql!(
    "DELETE FROM mideng_locks WHERE "
    {
        postgres: "name IN (SELECT name FROM mideng_locks WHERE ",
        sqlite: "rowid IN (SELECT rowid FROM mideng_locks WHERE ",
        mysql: ""
    }
    "held_until <= " ? { mysql: " ORDER BY held_until", _: "" } " LIMIT " ?
    { postgres: " FOR UPDATE SKIP LOCKED)", sqlite: ")", mysql: "" }
);
const RENEW: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_locks SET held_until = " ? " WHERE name = " ? " AND owner = " ?
);

async fn try_acquire_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    name: &Name,
    held_until_ms: i64,
) -> Result<Option<LockGuard>, StoreError> {
    let owner = new_owner();
    connection
        .run(
            INSERT.get::<D>(),
            &[
                Arg::Text(name.as_str()),
                Arg::Text(&owner),
                Arg::Int(held_until_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    let row = connection
        .row(SELECT_LOCKED.get::<D>(), &[Arg::Text(name.as_str())])
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| corrupt("lock row vanished"))?;
    let read = |error: sqlx::Error| StoreError::Corrupt(format!("unreadable lock: {error}"));
    let (current_owner, until) = (row.text(0).map_err(read)?, row.int(2).map_err(read)?);
    // The clock is read once the row lock is held, for the same reason as in records' `begin_on`.
    if current_owner != owner && until > now_ms() {
        return Ok(None);
    }
    let fence = next_fence::<D>(connection, name).await?;
    connection
        .run(
            TAKE.get::<D>(),
            &[
                Arg::Text(&owner),
                Arg::Int(as_i64(fence)),
                Arg::Int(held_until_ms),
                Arg::Text(name.as_str()),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Some(LockGuard {
        name: name.clone(),
        owner,
        fence,
        held_until_ms,
    }))
}

/// The next fence of `name`'s slot, counted in the caller's transaction.
async fn next_fence<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    name: &Name,
) -> Result<u64, StoreError> {
    let slot = Arg::Int(i64::from(lock::fence_slot(name)));
    // The clock is read under the lock row's lock, like the expiry check.
    let now_us = Arg::Int(as_i64(lock::fence_floor(now_ms())));
    let changed = connection
        .run(NEXT_FENCE.get::<D>(), &[now_us, now_us, slot])
        .await
        .map_err(store_error::<D>)?;
    if changed != 1 {
        return Err(corrupt(
            "a lock's fence slot is missing (toolkit migration 6)",
        ));
    }
    let row = connection
        .row(SLOT_FENCE.get::<D>(), &[slot])
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| corrupt("a lock's fence slot vanished"))?;
    as_fence(
        row.int(0)
            .map_err(|error| StoreError::Corrupt(format!("unreadable fence: {error}")))?,
    )
}

#[async_trait]
impl<D: Dialect> LockStore for SqlStore<D> {
    async fn try_acquire(
        &self,
        name: &Name,
        ttl: Duration,
    ) -> Result<Option<LockGuard>, StoreError> {
        let _timer = timer::<D>(op::LOCK_ACQUIRE);
        let held_until_ms = now_ms().saturating_add(lock::ttl_ms(ttl)?);
        self.write(|transaction| Box::pin(try_acquire_on::<D>(transaction, name, held_until_ms)))
            .await
    }

    async fn release(&self, guard: &LockGuard) -> Result<bool, StoreError> {
        let _timer = timer::<D>(op::LOCK_RELEASE);
        let changed = self
            .run_once(
                RELEASE.get::<D>(),
                &[Arg::Text(guard.name.as_str()), Arg::Text(&guard.owner)],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn renew(&self, guard: &LockGuard, ttl: Duration) -> Result<bool, StoreError> {
        let _timer = timer::<D>(op::LOCK_RENEW);
        let held_until_ms = now_ms().saturating_add(lock::ttl_ms(ttl)?);
        let changed = self
            .run_once(
                RENEW.get::<D>(),
                &[
                    Arg::Int(held_until_ms),
                    Arg::Text(guard.name.as_str()),
                    Arg::Text(&guard.owner),
                ],
            )
            .await?;
        Ok(changed == 1)
    }

    async fn purge_expired_locks(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = timer::<D>(op::LOCK_PURGE);
        let limit = i64::from(limit.min(PURGE_BATCH_ROWS_MAX));
        self.run_once(PURGE.get::<D>(), &[Arg::Int(now_ms), Arg::Int(limit)])
            .await
    }
}
