//! A server that takes no writes — a primary demoted by a failover, still holding the pool's
//! connections, or a standby — is *unavailable*, not a failure: nothing was written, the
//! primary is elsewhere, and the caller's retry reaches it. The idempotency layer answers 503
//! then (and frees the key), never a 500. The storm found this: after a PostgreSQL failover,
//! `cannot execute INSERT in a read-only transaction` came back as an internal error.
//!
//! Each test opens the store on connections whose sessions are read only, as a demoted
//! primary's are, on the real servers.
#![cfg(all(feature = "postgres", feature = "mysql"))]

mod support;

use std::time::Duration;

use mideng::sqlx::Executor as _;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::{Fingerprint, IdempotencyKey, RecordPolicy, RecordStore, Scope, StoreError};

/// What beginning a fresh key's record on `store` comes to.
async fn begin_on(store: &dyn RecordStore) -> Result<(), StoreError> {
    let scope = Scope::new("tenant", "read.only").expect("scope");
    let key = IdempotencyKey::parse(&support::unique("ro")).expect("key");
    let fingerprint = Fingerprint::of_parts(&[b"read", b"only"]);
    let policy =
        RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(3600)).expect("policy");
    store
        .begin(&scope, &key, &fingerprint, &policy)
        .await
        .map(|_| ())
}

fn assert_unavailable(outcome: Result<(), StoreError>, server: &str) {
    match outcome {
        Err(error @ StoreError::Unavailable(_)) => assert!(error.is_transient()),
        other => panic!("{server}: a read-only server must be unavailable, not {other:?}"),
    }
}

#[tokio::test]
async fn postgres_a_read_only_session_is_unavailable_not_a_failure() {
    // The tables exist (migrated on an ordinary connection); the store then writes through
    // read-only sessions only.
    support::postgres_store().await;
    let url = std::env::var("MIDENG_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| support::POSTGRES_URL.to_owned());
    let pool = mideng::sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection
                    .execute("SET default_transaction_read_only = on")
                    .await
                    .map(|_| ())
            })
        })
        .connect(&url)
        .await
        .expect("a pool of read-only sessions");
    let store = PostgresStore::from_pool(pool);
    assert_unavailable(begin_on(&store).await, "PostgreSQL");
}

#[tokio::test]
async fn mysql_a_read_only_session_is_unavailable_not_a_failure() {
    support::mysql_store().await;
    let url =
        std::env::var("MIDENG_TEST_MYSQL_URL").unwrap_or_else(|_| support::MYSQL_URL.to_owned());
    let pool = mideng::sqlx::mysql::MySqlPoolOptions::new()
        .max_connections(2)
        .after_connect(|connection, _| {
            Box::pin(async move {
                connection
                    .execute("SET SESSION TRANSACTION READ ONLY")
                    .await
                    .map(|_| ())
            })
        })
        .connect(&url)
        .await
        .expect("a pool of read-only sessions");
    let store = MySqlStore::from_pool(pool);
    assert_unavailable(begin_on(&store).await, "MariaDB");
}
