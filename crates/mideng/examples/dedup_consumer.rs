//! A consumer of an at-least-once queue with the dedup table: a message delivered again after
//! its acknowledgement was lost grants the coupon once.
//!
//! `cargo run -p mideng --example dedup_consumer`

#![allow(clippy::print_stdout)]

use std::time::Duration;

use mideng::dedup::{DedupOutcome, DedupTable};
use mideng::outbox::queue::SqlQueue;
use mideng::outbox::{Message, Publisher, Subscriber};
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
    let queue = SqlQueue::new(store.clone());
    let message = Message {
        id: "evt-7f3a".to_owned(),
        topic: "coupon.grant".to_owned(),
        key: "user-42".to_owned(),
        payload: br#"{"user":"user-42","coupon":"NEWYEAR"}"#.to_vec(),
    };
    queue.publish(&message).await?;

    let dedup = DedupTable::new(store.clone(), Duration::from_secs(30 * 86_400));
    let mut consumer = queue.subscribe("coupon.grant", 10, Duration::from_secs(30))?;
    let (mut deliveries, mut granted) = (0, 0);
    while let Some(delivery) = consumer.next(Duration::from_millis(300)).await? {
        deliveries += 1;
        match dedup
            .try_process(
                "coupon.grant",
                &delivery.message.id,
                Duration::from_secs(60),
            )
            .await?
        {
            DedupOutcome::First(claim) => {
                granted += 1; // grant the coupon, then mark the message done
                dedup.complete(&claim).await?;
                // The acknowledgement is lost (the consumer died first): the broker delivers
                // the message again.
                delivery.retry(Duration::ZERO).await?;
            }
            // A redelivery: acknowledge and do nothing.
            DedupOutcome::Done => delivery.ack().await?,
            // Another consumer has it right now: let the broker deliver it again later.
            DedupOutcome::InProgress { .. } => delivery.retry(Duration::from_secs(1)).await?,
        }
    }
    println!("{deliveries} deliveries, {granted} coupon granted");
    assert_eq!((deliveries, granted), (2, 1));
    drop(store);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(format!("{}{suffix}", path.display()));
    }
    Ok(())
}
