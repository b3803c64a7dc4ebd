//! A lock with its fence: the write that follows the lock carries the fence, and the data
//! refuses a fence lower than one it has seen, so a holder paused past its lease cannot write
//! over the next holder's work. A long holder keeps its lease alive while it works.
//!
//! `cargo run -p mideng --example fenced_lock`

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::Duration;

use mideng::key::Name;
use mideng::lock::{LockStore, keep_alive};
use mideng::store::memory::MemoryStore;
use mideng::store::sql::{PoolSettings, sqlite::SqliteStore};

/// Writes `status` for order 1001 if no later holder of its lock has written: the fence
/// column only grows, and the `WHERE` refuses a lower one.
async fn write_under_fence(
    database: &SqliteStore,
    fence: u64,
    status: &str,
) -> Result<bool, Box<dyn std::error::Error>> {
    let fence = i64::try_from(fence)?;
    let written = mideng::sqlx::query(
        "UPDATE orders SET status = ?, lock_fence = ? WHERE id = 1001 AND lock_fence <= ?",
    )
    .bind(status)
    .bind(fence)
    .bind(fence)
    .execute(database.pool())
    .await?;
    Ok(written.rows_affected() == 1)
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let database = SqliteStore::connect("sqlite::memory:", PoolSettings::default()).await?;
    mideng::sqlx::query(
        "CREATE TABLE orders (id INTEGER PRIMARY KEY, status TEXT NOT NULL, lock_fence INTEGER NOT NULL DEFAULT 0)",
    )
    .execute(database.pool())
    .await?;
    mideng::sqlx::query("INSERT INTO orders (id, status) VALUES (1001, 'CREATED')")
        .execute(database.pool())
        .await?;

    let locks: Arc<dyn LockStore> = Arc::new(MemoryStore::new());
    let name = Name::parse("order:shop-1:1001")?;
    let lease = Duration::from_millis(300);

    // The first holder stalls past its lease (it does not renew)...
    let paused = locks
        .acquire(&name, lease, Duration::from_millis(100))
        .await?
        .ok_or("the lock is free")?;
    tokio::time::sleep(lease + Duration::from_millis(50)).await;

    // ... so the next one gets the lock, keeps it alive while it works, and writes.
    let current = locks
        .acquire(&name, lease, Duration::from_millis(100))
        .await?
        .ok_or("the lease ran out")?;
    let renewal = keep_alive(
        locks.clone(),
        current.clone(),
        lease,
        Duration::from_secs(10),
    )?;
    tokio::time::sleep(lease * 2).await; // longer than the lease: still held
    assert!(renewal.held());
    assert!(write_under_fence(&database, current.fence, "PAID").await?);
    drop(renewal);
    locks.release(&current).await?;

    // The stalled holder wakes up: its write is refused, and it cannot release the lock.
    assert!(!write_under_fence(&database, paused.fence, "CLOSED").await?);
    assert!(!locks.release(&paused).await?);
    println!(
        "fence {} wrote PAID; the stalled holder's fence {} was refused",
        current.fence, paused.fence
    );
    Ok(())
}
