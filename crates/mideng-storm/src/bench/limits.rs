//! The machine's limits on the same run, through the same driver, pool size and transaction
//! shape as the service: one-row-insert commits, conditional updates of one hot row, and a
//! deduct done by SQL alone (on PostgreSQL one statement outside a transaction, as the
//! service's first-time deduct is), on the deployment's database (SQLite, PostgreSQL, MySQL or
//! MariaDB); and Redis round trips through the same client as the service's stores. The
//! pgbench scripts of the same statements are made here too, so that both tools run the same
//! SQL (see `super::pgbench`).
//!
//! The bench's tables (`mideng_bench_*`) are its own, created in the deployment's database,
//! which the run drops afterwards:
//! - `mideng_bench_rows`: the rows of the one-row-insert commits.
//! - `mideng_bench_wallets`: row 1 is the hot row; rows from [`DISTINCT_WALLET_FIRST_ID`] on are
//!   one per client, for the SQL deduct.
//! - `mideng_bench_records` and `mideng_bench_ledger`: what the SQL deduct inserts, shaped like
//!   an idempotency record (a unique key, a fingerprint) and a ledger entry (unique per wallet
//!   and record, with the balance after it).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use anyhow::Context;
use mideng::sqlx::Row;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;

use super::load::{Outcome, Tally, drive};

/// Connections of the service's pool in a deployment (`crate::deploy`), used here too.
const POOL_CONNECTIONS: u32 = 16;
/// The id of the first client's row for the SQL deduct (client `n` has this plus `n`); the hot
/// row is 1.
pub(super) const DISTINCT_WALLET_FIRST_ID: i64 = 1_000;
/// The balance of every bench row: far more than any run takes, 1 at a time.
const WALLET_FUNDS: i64 = 1_000_000_000_000_000;
/// How long the Redis keys of the bench live.
const REDIS_KEY_TTL_MS: u64 = 60_000;

/// 64 bytes, about a record's key and fingerprint: the text every inserted row carries, spliced
/// into the statements as a literal (it is this constant, never input).
macro_rules! payload {
    () => {
        "'0123456789abcdef0123456789abcdef0123456789abcdef0123456789abcdef'"
    };
}

/// A deduct by SQL alone: what the service's deduct does to the database, without the service.
enum SqlDeduct {
    /// One statement (PostgreSQL's data-modifying CTEs); binds the record key, then the wallet.
    OneStatement(&'static str),
    /// Three statements in one transaction, where the dialect has no writable CTEs: the record
    /// (binds its key), the conditional decrement (binds the wallet), the ledger entry (binds
    /// the record key and the wallet).
    ThreeStatements {
        record: &'static str,
        debit: &'static str,
        ledger: &'static str,
    },
}

/// The bench's statements in one dialect.
struct Statements {
    /// The ledger's table (its generated key is written differently in each dialect).
    create_ledger: &'static str,
    /// Binds the row id.
    insert_row: &'static str,
    deduct: SqlDeduct,
}

/// The tables every dialect creates alike.
const CREATE_TABLES: [&str; 3] = [
    "CREATE TABLE IF NOT EXISTS mideng_bench_rows (id BIGINT PRIMARY KEY, \
     payload TEXT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS mideng_bench_wallets (id BIGINT PRIMARY KEY, \
     balance BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS mideng_bench_records (record_key BIGINT PRIMARY KEY, \
     fingerprint TEXT NOT NULL)",
];

/// The hot row's conditional update, alike in every dialect; binds nothing (the hot row is 1).
const HOT_UPDATE: &str =
    "UPDATE mideng_bench_wallets SET balance = balance - 1 WHERE id = 1 AND balance >= 1";

const POSTGRES: Statements = Statements {
    create_ledger: "CREATE TABLE IF NOT EXISTS mideng_bench_ledger (\
                    entry_id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
                    wallet_id BIGINT NOT NULL, record_key BIGINT NOT NULL, \
                    amount BIGINT NOT NULL, balance_after BIGINT NOT NULL, \
                    UNIQUE (wallet_id, record_key))",
    insert_row: concat!(
        "INSERT INTO mideng_bench_rows (id, payload) VALUES ($1, ",
        payload!(),
        ")"
    ),
    deduct: SqlDeduct::OneStatement(POSTGRES_DEDUCT),
};

/// PostgreSQL's deduct by SQL alone: the record, the conditional decrement and the ledger entry
/// in one statement; the entry is inserted only if both others happened.
const POSTGRES_DEDUCT: &str = concat!(
    "WITH record AS (INSERT INTO mideng_bench_records (record_key, fingerprint) VALUES ($1, ",
    payload!(),
    ") RETURNING record_key), debit AS (UPDATE mideng_bench_wallets SET balance = balance - 1 \
     WHERE id = $2 AND balance >= 1 RETURNING balance) INSERT INTO mideng_bench_ledger \
     (wallet_id, record_key, amount, balance_after) SELECT $2, record.record_key, 1, \
     debit.balance FROM record, debit"
);

const MYSQL: Statements = Statements {
    create_ledger: "CREATE TABLE IF NOT EXISTS mideng_bench_ledger (\
                    entry_id BIGINT AUTO_INCREMENT PRIMARY KEY, \
                    wallet_id BIGINT NOT NULL, record_key BIGINT NOT NULL, \
                    amount BIGINT NOT NULL, balance_after BIGINT NOT NULL, \
                    UNIQUE (wallet_id, record_key))",
    insert_row: concat!(
        "INSERT INTO mideng_bench_rows (id, payload) VALUES (?, ",
        payload!(),
        ")"
    ),
    deduct: SqlDeduct::ThreeStatements {
        record: concat!(
            "INSERT INTO mideng_bench_records (record_key, fingerprint) VALUES (?, ",
            payload!(),
            ")"
        ),
        debit: "UPDATE mideng_bench_wallets SET balance = balance - 1 \
                WHERE id = ? AND balance >= 1",
        ledger: "INSERT INTO mideng_bench_ledger (wallet_id, record_key, amount, balance_after) \
                 SELECT id, ?, 1, balance FROM mideng_bench_wallets WHERE id = ?",
    },
};

const SQLITE: Statements = Statements {
    create_ledger: "CREATE TABLE IF NOT EXISTS mideng_bench_ledger (\
                    entry_id INTEGER PRIMARY KEY, \
                    wallet_id BIGINT NOT NULL, record_key BIGINT NOT NULL, \
                    amount BIGINT NOT NULL, balance_after BIGINT NOT NULL, \
                    UNIQUE (wallet_id, record_key))",
    insert_row: concat!(
        "INSERT INTO mideng_bench_rows (id, payload) VALUES ($1, ",
        payload!(),
        ")"
    ),
    deduct: SqlDeduct::ThreeStatements {
        record: concat!(
            "INSERT INTO mideng_bench_records (record_key, fingerprint) VALUES ($1, ",
            payload!(),
            ")"
        ),
        debit: "UPDATE mideng_bench_wallets SET balance = balance - 1 \
                WHERE id = $1 AND balance >= 1",
        ledger: "INSERT INTO mideng_bench_ledger (wallet_id, record_key, amount, balance_after) \
                 SELECT id, $1, 1, balance FROM mideng_bench_wallets WHERE id = $2",
    },
};

/// Where pgbench's keys and row ids start: far above the same driver's (counted from 1), so
/// that both tools can insert into one table. pgbench draws them at random up to `i64::MAX - 1`
/// (it has no per-client counter); a repeat among a run's few million draws in 2^62 is as good
/// as impossible, and would end that pgbench run with an error, never a wrong figure.
const PGBENCH_KEYS_FIRST: i64 = 1 << 62;

/// The pgbench scripts (PostgreSQL): the same statements as the same-driver limits, with
/// pgbench variables for the bound values, each statement its own transaction.
pub(super) fn pgbench_scripts() -> [(super::LimitKind, String); 3] {
    let random = format!("random({PGBENCH_KEYS_FIRST}, {})", i64::MAX - 1);
    [
        (
            super::LimitKind::OneRowInsert,
            format!(
                "\\set id {random}\n{};\n",
                POSTGRES.insert_row.replace("$1", ":id")
            ),
        ),
        (super::LimitKind::HotRowUpdate, format!("{HOT_UPDATE};\n")),
        (
            super::LimitKind::SqlDeduct,
            format!(
                "\\set key {random}\n\\set wallet {DISTINCT_WALLET_FIRST_ID} + :client_id\n{};\n",
                POSTGRES_DEDUCT
                    .replace("$1", ":key")
                    .replace("$2", ":wallet")
            ),
        ),
    ]
}

/// The deployment's database, opened as the service opens it.
enum Store {
    Sqlite(SqliteStore),
    Postgres(PostgresStore),
    MySql(MySqlStore),
}

/// Runs `$body` with `$store` bound to whichever store `$database` holds: the same code,
/// type-checked once per driver.
macro_rules! on_store {
    ($database:expr, $store:ident => $body:expr) => {
        match $database {
            Store::Sqlite($store) => $body,
            Store::Postgres($store) => $body,
            Store::MySql($store) => $body,
        }
    };
}

fn text(error: impl std::fmt::Display) -> String {
    error.to_string()
}

/// `Err` unless a statement changed exactly one row.
fn one_row(changed: u64, what: &str) -> Result<(), String> {
    if changed == 1 {
        Ok(())
    } else {
        Err(format!("{what}: {changed} rows changed, 1 expected"))
    }
}

/// The deployment's database with the bench's tables, for the same-driver limits.
pub(super) struct BenchDatabase {
    store: Store,
    statements: &'static Statements,
    engine: &'static str,
    /// The next row id or record key of the same driver.
    next_id: AtomicU64,
}

impl BenchDatabase {
    /// Opens the database at `url` with the service's pool size, creates the bench's tables and
    /// funds the hot row and one row per client.
    pub(super) async fn open(url: &str, concurrency: usize) -> anyhow::Result<Self> {
        let settings = PoolSettings {
            connections_max: POOL_CONNECTIONS,
            ..PoolSettings::default()
        };
        let (store, statements, engine) = if url.starts_with("sqlite:") {
            let store = SqliteStore::connect(url, settings).await?;
            (Store::Sqlite(store), &SQLITE, "SQLite")
        } else if url.starts_with("postgres") {
            let store = PostgresStore::connect(url, settings).await?;
            (Store::Postgres(store), &POSTGRES, "PostgreSQL")
        } else if crate::deploy::is_mysql(url) {
            let url = url.replacen("mariadb://", "mysql://", 1);
            let store = MySqlStore::connect(&url, settings).await?;
            let version: String = mideng::sqlx::query("SELECT VERSION()")
                .fetch_one(store.pool())
                .await?
                .try_get(0)?;
            let engine = if version.contains("MariaDB") {
                "MariaDB"
            } else {
                "MySQL"
            };
            (Store::MySql(store), &MYSQL, engine)
        } else {
            anyhow::bail!("no bench tables for {}", mideng::redact::url(url));
        };
        let clients = i64::try_from(concurrency).context("concurrency")?;
        // Integers only: safe to splice.
        let rows: Vec<String> = std::iter::once(1)
            .chain((0..clients).map(|client| DISTINCT_WALLET_FIRST_ID + client))
            .map(|id| format!("({id}, {WALLET_FUNDS})"))
            .collect();
        let fund = format!(
            "INSERT INTO mideng_bench_wallets (id, balance) VALUES {}",
            rows.join(", ")
        );
        on_store!(&store, store => {
            for create in CREATE_TABLES.into_iter().chain([statements.create_ledger]) {
                mideng::sqlx::query(create).execute(store.pool()).await?;
            }
            mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(fund))
                .execute(store.pool())
                .await?;
        });
        Ok(Self {
            store,
            statements,
            engine,
            next_id: AtomicU64::new(1),
        })
    }

    /// `PostgreSQL`, `MariaDB`, `MySQL` or `SQLite`.
    pub(super) fn engine(&self) -> &'static str {
        self.engine
    }

    /// How this dialect's SQL deduct is made, for the limit's name.
    pub(super) fn deduct_shape(&self) -> &'static str {
        match self.statements.deduct {
            SqlDeduct::OneStatement(_) => "in one statement (writable CTEs), committing itself",
            SqlDeduct::ThreeStatements { .. } => {
                "in three statements, one transaction (no writable CTEs)"
            }
        }
    }

    fn next_id(&self) -> Option<i64> {
        i64::try_from(self.next_id.fetch_add(1, Ordering::Relaxed)).ok()
    }

    /// One write transaction (`BEGIN IMMEDIATE` on SQLite) inserting one row, committed.
    async fn insert_row(&self, id: i64) -> Result<(), String> {
        let sql = self.statements.insert_row;
        on_store!(&self.store, store => {
            let mut transaction = store.begin_write().await.map_err(text)?;
            mideng::sqlx::query(sql)
                .bind(id)
                .execute(&mut *transaction)
                .await
                .map_err(text)?;
            transaction.commit().await.map_err(text)
        })
    }

    /// One write transaction taking 1 from the hot row if it has it, committed.
    async fn update_hot_row(&self) -> Result<(), String> {
        let sql = HOT_UPDATE;
        on_store!(&self.store, store => {
            let mut transaction = store.begin_write().await.map_err(text)?;
            let changed = mideng::sqlx::query(sql)
                .execute(&mut *transaction)
                .await
                .map_err(text)?
                .rows_affected();
            one_row(changed, "the hot row")?;
            transaction.commit().await.map_err(text)
        })
    }

    /// A deduct by SQL alone on `wallet`, committed: the one statement on its own (it commits
    /// itself, as the service's one-statement deduct and pgbench's do), or the three in one
    /// write transaction.
    async fn deduct(&self, key: i64, wallet: i64) -> Result<(), String> {
        on_store!(&self.store, store => {
            match self.statements.deduct {
                SqlDeduct::OneStatement(sql) => {
                    let mut connection = store.pool().acquire().await.map_err(text)?;
                    let entries = mideng::sqlx::query(sql)
                        .bind(key)
                        .bind(wallet)
                        .execute(&mut *connection)
                        .await
                        .map_err(text)?
                        .rows_affected();
                    one_row(entries, "the ledger entry")
                }
                SqlDeduct::ThreeStatements { record, debit, ledger } => {
                    let mut transaction = store.begin_write().await.map_err(text)?;
                    mideng::sqlx::query(record)
                        .bind(key)
                        .execute(&mut *transaction)
                        .await
                        .map_err(text)?;
                    let debited = mideng::sqlx::query(debit)
                        .bind(wallet)
                        .execute(&mut *transaction)
                        .await
                        .map_err(text)?
                        .rows_affected();
                    one_row(debited, "the balance")?;
                    mideng::sqlx::query(ledger)
                        .bind(key)
                        .bind(wallet)
                        .execute(&mut *transaction)
                        .await
                        .map_err(text)?;
                    transaction.commit().await.map_err(text)
                }
            }
        })
    }

    /// Closes the pool.
    pub(super) async fn close(&self) {
        on_store!(&self.store, store => store.pool().close().await);
    }
}

/// What a same-driver limit runs, once per operation.
#[derive(Clone, Copy, Debug)]
pub(super) enum Work {
    /// A one-row-insert commit.
    InsertRow,
    /// A conditional update of the hot row, committed.
    UpdateHotRow,
    /// A deduct by SQL alone on the client's own row, committed.
    SqlDeduct,
}

/// `work` on `database`, `concurrency` at a time, for `duration`.
pub(super) async fn same_driver(
    database: &Arc<BenchDatabase>,
    work: Work,
    concurrency: usize,
    duration: Duration,
) -> Tally {
    let shared = database.clone();
    drive(concurrency, duration, move |client, _| {
        let database = shared.clone();
        async move {
            let done = match work {
                Work::InsertRow => database.insert_row(database.next_id()?).await,
                Work::UpdateHotRow => database.update_hot_row().await,
                Work::SqlDeduct => {
                    let wallet = DISTINCT_WALLET_FIRST_ID + i64::try_from(client).ok()?;
                    database.deduct(database.next_id()?, wallet).await
                }
            };
            Some(match done {
                Ok(()) => Outcome::Done,
                Err(error) => Outcome::Failed(error),
            })
        }
    })
    .await
}

/// Redis round trips at `address` (`host:port`), alternating `SET key 1 NX PX` on a new key and
/// `GET` of it (the shapes of a token or lock write and a read), over one multiplexed
/// connection manager as the service uses.
pub(super) async fn redis(
    address: &str,
    prefix: &str,
    concurrency: usize,
    duration: Duration,
) -> anyhow::Result<Tally> {
    let client = redis::Client::open(format!("redis://{address}/"))?;
    let connection = redis::aio::ConnectionManager::new(client)
        .await
        .with_context(|| format!("connecting to Redis at {address}"))?;
    let prefix: Arc<str> = Arc::from(prefix);
    Ok(drive(concurrency, duration, move |client, iteration| {
        let (mut connection, prefix) = (connection.clone(), prefix.clone());
        async move {
            let key = format!("{prefix}:{client}:{}", iteration / 2);
            let answer = if iteration % 2 == 0 {
                redis::cmd("SET")
                    .arg(&key)
                    .arg(1)
                    .arg("NX")
                    .arg("PX")
                    .arg(REDIS_KEY_TTL_MS)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .map(|set| set.is_some())
            } else {
                redis::cmd("GET")
                    .arg(&key)
                    .query_async::<Option<String>>(&mut connection)
                    .await
                    .map(|value| value.is_some())
            };
            Some(match answer {
                Ok(true) => Outcome::Done,
                Ok(false) => Outcome::Failed(format!("unexpected answer for {key}")),
                Err(error) => Outcome::Failed(error.to_string()),
            })
        }
    })
    .await)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pgbench_runs_the_statements_of_the_same_driver() {
        let scripts = pgbench_scripts();
        let script = |kind| {
            scripts
                .iter()
                .find(|(found, _)| *found == kind)
                .map(|(_, script)| script.clone())
                .unwrap_or_default()
        };
        let insert = script(super::super::LimitKind::OneRowInsert);
        assert!(
            insert.contains(&POSTGRES.insert_row.replace("$1", ":id")),
            "{insert}"
        );
        let deduct = script(super::super::LimitKind::SqlDeduct);
        assert!(
            deduct.contains("\\set wallet 1000 + :client_id"),
            "{deduct}"
        );
        assert!(
            !deduct.contains('$'),
            "every bound value is a variable: {deduct}"
        );
        assert_eq!(
            script(super::super::LimitKind::HotRowUpdate),
            format!("{HOT_UPDATE};\n")
        );
    }
}
