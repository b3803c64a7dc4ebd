//! A commit waiting for PostgreSQL's synchronous standby is already visible to other sessions
//! on the primary; a failover before the standby has it loses it. An answer built on reading
//! it — a stored response replayed — must not go out before the standby confirms it, or it
//! outlives what it stood on (the storm found this: an event's parking, read by a redelivery
//! on a primary cut off from its standby, acknowledged, and lost with the failover).
//!
//! The test runs a PostgreSQL cluster of its own (Debian's server binaries, a data directory
//! under the target directory, a free loopback port) whose `synchronous_standby_names` names a
//! standby that never connects: every commit then waits, visible and unconfirmed, as on a
//! primary cut off from its standby. A replay of a record whose completion waits so must wait
//! too, and answer once the standby requirement is lifted.
#![cfg(feature = "postgres")]

mod support;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::{Claim, Once, PoolSettings};
use mideng::{
    Decision, Fingerprint, IdempotencyKey, RecordPolicy, RecordStore, Scope, StoreError,
    StoredResponse,
};

/// How long a replay that must wait is watched not answering.
const WATCHED: Duration = Duration::from_secs(2);

/// A PostgreSQL cluster of this test's own, stopped and removed on drop.
struct Cluster {
    bin: PathBuf,
    dir: PathBuf,
    port: u16,
}

impl Cluster {
    fn start() -> Self {
        let bin = std::fs::read_dir("/usr/lib/postgresql")
            .expect("PostgreSQL's server binaries under /usr/lib/postgresql (Debian's postgresql)")
            .flatten()
            .map(|entry| entry.path().join("bin"))
            .filter(|bin| bin.join("initdb").exists())
            .max()
            .expect("an initdb under /usr/lib/postgresql/*/bin");
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR")).join(support::unique("durability"));
        std::fs::create_dir_all(&dir).expect("the cluster's directory");
        // PostgreSQL refuses to run as root: as `postgres` then, on a directory it owns.
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.starts_with(b"0"));
        if root {
            run(Command::new("chown").arg("postgres:").arg(&dir));
        }
        let data = dir.join("data");
        run(as_server(root, &bin.join("initdb"))
            .args(["-A", "trust", "-U", "postgres", "--no-sync", "-D"])
            .arg(&data));
        let port = std::net::TcpListener::bind("127.0.0.1:0")
            .and_then(|listener| listener.local_addr())
            .expect("a free port")
            .port();
        let options = format!(
            "-p {port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={} -c fsync=off",
            dir.display()
        );
        run(as_server(root, &bin.join("pg_ctl"))
            .args(["-w", "-t", "30", "-o", &options, "-l"])
            .arg(dir.join("log"))
            .arg("-D")
            .arg(&data)
            .arg("start"));
        Self { bin, dir, port }
    }

    fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }
}

impl Drop for Cluster {
    fn drop(&mut self) {
        let root = Command::new("id")
            .arg("-u")
            .output()
            .is_ok_and(|out| out.stdout.starts_with(b"0"));
        let _ = as_server(root, &self.bin.join("pg_ctl"))
            .args(["-m", "immediate", "-D"])
            .arg(self.dir.join("data"))
            .arg("stop")
            .output();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

fn as_server(root: bool, program: &Path) -> Command {
    if root {
        let mut command = Command::new("runuser");
        command.args(["-u", "postgres", "--"]).arg(program);
        command
    } else {
        Command::new(program)
    }
}

fn run(command: &mut Command) {
    let output = command.output().expect("runs");
    assert!(
        output.status.success(),
        "{command:?}: {}",
        String::from_utf8_lossy(&output.stderr)
    );
}

/// Names a synchronous standby that never connects (`ghost`), or none.
async fn require_standby(pool: &sqlx::PgPool, required: bool) {
    let statement = if required {
        "ALTER SYSTEM SET synchronous_standby_names = 'ghost'"
    } else {
        "ALTER SYSTEM RESET synchronous_standby_names"
    };
    sqlx::query(statement)
        .execute(pool)
        .await
        .expect("ALTER SYSTEM");
    sqlx::query("SELECT pg_reload_conf()")
        .execute(pool)
        .await
        .expect("reload");
    // Every backend reads the reloaded file at its next command: wait until a fresh one does.
    let wanted = if required { "ghost" } else { "" };
    for _ in 0..100 {
        let mut connection = pool.acquire().await.expect("a connection");
        let shown: String = sqlx::query_scalar("SHOW synchronous_standby_names")
            .fetch_one(&mut *connection)
            .await
            .expect("SHOW");
        if shown == wanted {
            return;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    panic!("synchronous_standby_names never became {wanted:?}");
}

/// The work of a claim on a completed key, which must never run: it would fail the claim.
type Work<'c> = std::pin::Pin<
    Box<dyn std::future::Future<Output = Result<((), StoredResponse), StoreError>> + Send + 'c>,
>;

fn runs_nothing<'c>(_: &'c mut sqlx::Transaction<'static, sqlx::Postgres>) -> Work<'c> {
    Box::pin(async {
        Err(StoreError::Corrupt(
            "a completed key ran its work".to_owned(),
        ))
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_replay_waits_until_the_standby_has_what_it_replays() {
    let cluster = Cluster::start();
    let store = PostgresStore::connect(&cluster.url(), PoolSettings::default())
        .await
        .expect("the test's own PostgreSQL");
    store.migrate().await.expect("migrate");
    let admin = sqlx::postgres::PgPoolOptions::new()
        .max_connections(2)
        .connect(&cluster.url())
        .await
        .expect("an admin pool");

    let scope = Scope::new("tenant", "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse("deduct-1").expect("key");
    let fingerprint = Fingerprint::of_parts(&[b"deduct", b"100"]);
    let policy =
        RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(3600)).expect("policy");
    let answer = StoredResponse {
        status: 201,
        headers: vec![],
        body: b"{\"deducted\":100}".to_vec(),
    };
    let Decision::Proceed(lease) = store
        .begin(&scope, &key, &fingerprint, &policy)
        .await
        .expect("begin")
    else {
        panic!("a fresh key proceeds");
    };

    // From here every commit waits for a standby that never comes. The completion's commit
    // waits; cancelled (a client that gave up, a server shutting down), it stays committed
    // here and visible to everyone, and the standby does not have it: what a primary cut off
    // from its standby holds when a failover loses it.
    require_standby(&admin, true).await;
    let completing = {
        let store = store.clone();
        let answer = answer.clone();
        tokio::spawn(async move { store.complete(&lease, &answer).await })
    };
    let mut cancelled = false;
    for _ in 0..100 {
        cancelled = sqlx::query_scalar::<_, bool>(
            "SELECT coalesce(bool_or(pg_cancel_backend(pid)), false) FROM pg_stat_activity \
             WHERE wait_event = 'SyncRep'",
        )
        .fetch_one(&admin)
        .await
        .expect("cancel the waiting commit");
        if cancelled {
            break;
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(cancelled, "the completion's commit waited for the standby");
    completing
        .await
        .expect("the completing task")
        .expect("a commit whose wait was cancelled is committed here");
    let state: Option<String> = sqlx::query_scalar(
        "SELECT state FROM mideng_records WHERE tenant = 'tenant' AND idempotency_key = 'deduct-1'",
    )
    .fetch_optional(&admin)
    .await
    .expect("read the record");
    assert_eq!(
        state.as_deref(),
        Some("completed"),
        "the completion the standby does not have is visible"
    );

    // A retry now must not be answered from it: not by the key layer's read...
    let replay = tokio::time::timeout(WATCHED, store.begin(&scope, &key, &fingerprint, &policy));
    assert!(
        replay.await.is_err(),
        "a replay answered while what it replays waited for the standby"
    );
    // ...nor by a claim inside a write transaction (the path of `write_once`).
    let claim = Claim {
        scope: &scope,
        key: &key,
        fingerprint: &fingerprint,
        policy,
    };
    let once = tokio::time::timeout(WATCHED, store.write_once(Some(&claim), runs_nothing));
    assert!(
        once.await.is_err(),
        "a claim decided a replay while what it replays waited for the standby"
    );

    // The standby requirement lifted (as a standby that confirms): everything answers.
    require_standby(&admin, false).await;
    match store
        .begin(&scope, &key, &fingerprint, &policy)
        .await
        .expect("begin")
    {
        Decision::Replay(replayed) => assert_eq!(replayed, answer),
        other => panic!("expected a replay, got {other:?}"),
    }
    match store
        .write_once(Some(&claim), runs_nothing)
        .await
        .expect("write_once")
    {
        Once::Decided(Decision::Replay(replayed)) => assert_eq!(replayed, answer),
        Once::Decided(other) => panic!("expected a replay, got {other:?}"),
        Once::Ran(..) => panic!("a completed key ran"),
    }
}
