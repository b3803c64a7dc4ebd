//! Fenced locks on SQL ([`LockStore`]).
//!
//! Acquiring runs in one write transaction: insert the lock row doing nothing if it exists,
//! read it under a row lock, and take it over with fence + 1 only if its holder's time ran
//! out. The fence therefore only grows, and a holder whose lock was taken over is refused by
//! anything that checks the fence. Release and renewal are one conditional update each, on
//! the owner, so a holder can never free or extend a lock it lost.

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
use crate::lock::{self, LockGuard, LockStore};
use crate::record::new_owner;

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_locks (name, owner, fence, held_until) VALUES (" ? ", " ? ", 1, " ? ")"
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
    " AND fence = " ?
);
const RELEASE: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_locks SET owner = '', held_until = 0 WHERE name = " ? " AND owner = " ?
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
    let (current_owner, fence, until) = (
        row.text(0).map_err(read)?,
        as_fence(row.int(1).map_err(read)?)?,
        row.int(2).map_err(read)?,
    );
    let guard = |fence: u64, owner: String| LockGuard {
        name: name.clone(),
        owner,
        fence,
        held_until_ms,
    };
    if current_owner == owner {
        return Ok(Some(guard(fence, owner)));
    }
    // The clock is read once the row lock is held, for the same reason as in records' `begin_on`.
    if until > now_ms() {
        return Ok(None);
    }
    let next = fence + 1;
    connection
        .run(
            TAKE.get::<D>(),
            &[
                Arg::Text(&owner),
                Arg::Int(as_i64(next)),
                Arg::Int(held_until_ms),
                Arg::Text(name.as_str()),
                Arg::Int(as_i64(fence)),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(Some(guard(next, owner)))
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
}
