//! The transactional outbox: the event is written in the transaction of the change that causes
//! it, so it exists if and only if the change commits; a relay publishes it afterwards and marks
//! it sent once the broker confirmed it (here the in-database queue).
//!
//! `cargo run -p mideng --example outbox`

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::time::Duration;

use mideng::outbox::Subscriber;
use mideng::outbox::queue::SqlQueue;
use mideng::outbox::sql::{Relay, RelaySettings, enqueue_in};
use mideng::store::sql::{PoolSettings, sqlite::SqliteStore};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    // A file of its own: the relay and the consumers use several connections at once.
    let path = std::env::temp_dir().join(format!("mideng-example-{}.db", std::process::id()));
    let store = SqliteStore::connect(
        &format!("sqlite://{}", path.display()),
        PoolSettings::default(),
    )
    .await?;
    store.migrate().await?;
    mideng::sqlx::query(
        "CREATE TABLE payments (payment_no TEXT PRIMARY KEY, status TEXT NOT NULL)",
    )
    .execute(store.pool())
    .await?;

    // The change and its event, one transaction.
    let mut transaction = store.begin_write().await?;
    mideng::sqlx::query("INSERT INTO payments (payment_no, status) VALUES ('P1001', 'PAID')")
        .execute(&mut *transaction)
        .await?;
    let id = enqueue_in::<mideng::store::sql::sqlite::SqliteDialect>(
        &mut transaction,
        "payment.succeeded",
        "P1001",
        br#"{"payment_no":"P1001"}"#,
    )
    .await?;
    transaction.commit().await?;

    // A transaction that rolls back leaves no event behind.
    let mut transaction = store.begin_write().await?;
    enqueue_in::<mideng::store::sql::sqlite::SqliteDialect>(
        &mut transaction,
        "payment.succeeded",
        "P1002",
        b"{}",
    )
    .await?;
    transaction.rollback().await?;

    let queue = SqlQueue::new(store.clone());
    let relay = Relay::new(
        store.clone(),
        Arc::new(queue.clone()),
        RelaySettings::default(),
    )?;
    let round = relay.run_once().await?;
    println!("relay round: {round:?}");

    let mut consumer = queue.subscribe("payment.succeeded", 10, Duration::from_secs(30))?;
    let delivery = consumer
        .next(Duration::from_secs(1))
        .await?
        .ok_or("the event was published")?;
    assert_eq!(
        delivery.message.id, id,
        "the outbox row's id is the message id"
    );
    println!(
        "consumed {} for {}",
        delivery.message.topic, delivery.message.key
    );
    delivery.ack().await?;
    assert!(
        consumer.next(Duration::from_millis(200)).await?.is_none(),
        "only the committed event"
    );
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}
