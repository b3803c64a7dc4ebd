//! Crash tests: a process that holds a lease is killed with SIGKILL, and a fresh process then
//! finds everything it committed intact and takes the dead owner's key over once the lease runs
//! out.
//!
//! Each test runs twice: as the parent (the test runner starts it) and, re-executed by the
//! parent with `MIDENG_CRASH_CHILD` set, as the child that is killed. One function, two roles,
//! so the test list holds no helper entries.

mod support;

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::time::Duration;

use mideng::{
    Decision, Fingerprint, IdempotencyKey, RecordPolicy, RecordState, RecordStore, Scope,
    StoredResponse,
};

const CHILD: &str = "MIDENG_CRASH_CHILD";
const STORE_URL: &str = "MIDENG_CRASH_STORE";
const TENANT: &str = "MIDENG_CRASH_TENANT";
const LEASE: Duration = Duration::from_millis(1500);

fn answer() -> StoredResponse {
    StoredResponse {
        status: 201,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: b"{\"committed\":true}".to_vec(),
    }
}

fn policy() -> RecordPolicy {
    RecordPolicy::new(LEASE, Duration::from_secs(3600)).expect("policy")
}

fn identity(tenant: &str, key: &str) -> (Scope, IdempotencyKey, Fingerprint) {
    (
        Scope::new(tenant, "wallet.deduct").expect("scope"),
        IdempotencyKey::parse(key).expect("key"),
        Fingerprint::of_parts(&[b"deduct", key.as_bytes()]),
    )
}

/// The child's part: complete one record, take a lease on another, say so, then hang until
/// killed.
// Standard output is the child's channel to the parent ("READY"), not a log.
#[allow(clippy::print_stdout)]
async fn child(store: &dyn RecordStore, tenant: &str) {
    let (scope, done, fingerprint) = identity(tenant, "done");
    let Decision::Proceed(lease) = store
        .begin(&scope, &done, &fingerprint, &policy())
        .await
        .expect("begin")
    else {
        panic!("fresh key");
    };
    store.complete(&lease, &answer()).await.expect("complete");
    let (scope, held, fingerprint) = identity(tenant, "held");
    let Decision::Proceed(_) = store
        .begin(&scope, &held, &fingerprint, &policy())
        .await
        .expect("begin")
    else {
        panic!("fresh key");
    };
    println!("READY");
    tokio::time::sleep(Duration::from_secs(3600)).await;
}

/// The parent's part: run the child, kill it once it holds the lease, then check as a new
/// process would.
async fn parent(test_name: &str, store_url: &str, store: &dyn RecordStore) {
    let tenant = support::unique("crash");
    let mut process = Command::new(std::env::current_exe().expect("test binary"))
        .args(["--exact", test_name, "--nocapture", "--test-threads", "1"])
        .env(CHILD, "1")
        .env(STORE_URL, store_url)
        .env(TENANT, &tenant)
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("child starts");
    let stdout = process.stdout.take().expect("piped");
    let ready = tokio::task::spawn_blocking(move || {
        BufReader::new(stdout)
            .lines()
            .map_while(Result::ok)
            .any(|line| line.contains("READY"))
    });
    assert!(
        tokio::time::timeout(Duration::from_secs(60), ready)
            .await
            .expect("child got ready in time")
            .expect("reader")
    );
    process.kill().expect("SIGKILL");
    let status = process.wait().expect("reaped");
    assert!(
        !status.success(),
        "the child died by the signal, not by finishing"
    );

    let (scope, done, fingerprint) = identity(&tenant, "done");
    let record = store
        .find_record(&scope, &done)
        .await
        .expect("find")
        .expect("the committed record survived the kill");
    assert_eq!(
        (record.state, record.response),
        (RecordState::Completed, Some(answer()))
    );
    assert_eq!(
        store
            .begin(&scope, &done, &fingerprint, &policy())
            .await
            .expect("begin"),
        Decision::Replay(answer())
    );

    let (scope, held, fingerprint) = identity(&tenant, "held");
    let decision = store
        .begin(&scope, &held, &fingerprint, &policy())
        .await
        .expect("begin");
    assert!(
        matches!(decision, Decision::InFlight { .. }),
        "the dead owner's lease still holds: {decision:?}"
    );
    tokio::time::sleep(LEASE + Duration::from_millis(300)).await;
    let Decision::Proceed(lease) = store
        .begin(&scope, &held, &fingerprint, &policy())
        .await
        .expect("begin")
    else {
        panic!("the expired lease is taken over");
    };
    assert!(lease.taken_over && lease.fence == 2);
    store
        .complete(&lease, &answer())
        .await
        .expect("the new owner completes");
}

macro_rules! crash_case {
    ($backend:ident, $open:expr, $url:expr) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn survives_a_killed_owner() {
                let url: String = match std::env::var(STORE_URL) {
                    Ok(url) => url,
                    Err(_) => $url,
                };
                let store = $open(url.clone()).await;
                if std::env::var(CHILD).is_ok() {
                    child(&store, &std::env::var(TENANT).expect("tenant")).await;
                } else {
                    let name = concat!(stringify!($backend), "::survives_a_killed_owner");
                    parent(name, &url, &store).await;
                }
            }
        }
    };
}

#[cfg(feature = "sqlite")]
async fn open_sqlite(url: String) -> mideng::store::sql::sqlite::SqliteStore {
    let store = mideng::store::sql::sqlite::SqliteStore::connect(
        &url,
        mideng::store::sql::PoolSettings::default(),
    )
    .await
    .expect("sqlite");
    store.migrate().await.expect("migrate");
    store
}

#[cfg(feature = "postgres")]
async fn open_postgres(url: String) -> mideng::store::sql::postgres::PostgresStore {
    let store = mideng::store::sql::postgres::PostgresStore::connect(
        &url,
        mideng::store::sql::PoolSettings::default(),
    )
    .await
    .expect("postgres (scripts/services up)");
    store.migrate().await.expect("migrate");
    store
}

#[cfg(feature = "sqlite")]
crash_case!(
    sqlite,
    super::open_sqlite,
    format!(
        "sqlite://{}",
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}.db", support::unique("crash")))
            .display()
    )
);
#[cfg(feature = "postgres")]
crash_case!(
    postgres,
    super::open_postgres,
    std::env::var("MIDENG_TEST_POSTGRES_URL").unwrap_or_else(|_| support::POSTGRES_URL.to_owned())
);
