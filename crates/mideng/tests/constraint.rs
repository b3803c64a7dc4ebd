//! Partial unique constraints on the real databases: of many concurrent inserts of a PENDING
//! row for one order exactly one succeeds, the others fail as unique violations (never another
//! kind of error), and rows in other states never conflict.

mod support;

use std::sync::Arc;

use mideng::constraint::PartialUnique;
use mideng::sqlx::{self, AssertSqlSafe};

const TASKS: usize = 32;

fn one_pending(table: &str) -> PartialUnique {
    PartialUnique::new(
        &format!("{table}_one_pending"),
        table,
        &["tenant_id", "order_id"],
        "status",
        "PENDING",
    )
    .expect("valid constraint")
}

/// The same case on every dialect; only the driver type and placeholder syntax differ.
macro_rules! partial_unique_case {
    ($backend:ident, $make:path, $kind:expr, $insert:literal) => {
        mod $backend {
        use super::*;

        #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
        async fn binds_one_pending_row_per_order() {
            let store = $make().await;
            let pool = store.pool().clone();
            let table = support::unique("payments").replace('-', "_");
            let create = format!(
                "CREATE TABLE {table} (payment_no VARCHAR(64) PRIMARY KEY, tenant_id VARCHAR(64) NOT NULL, \
                 order_id VARCHAR(64) NOT NULL, status VARCHAR(16) NOT NULL)"
            );
            sqlx::raw_sql(AssertSqlSafe(create)).execute(&pool).await.expect("create table");
            for statement in one_pending(&table).ddl($kind) {
                sqlx::raw_sql(AssertSqlSafe(statement)).execute(&pool).await.expect("apply constraint");
            }
            let insert = Arc::new(format!($insert, table = table));
            let attempt = |payment_no: String, status: &'static str| {
                let (pool, insert) = (pool.clone(), insert.clone());
                async move {
                    sqlx::query(AssertSqlSafe(insert.as_str().to_owned()))
                        .bind(payment_no)
                        .bind("t1")
                        .bind("o1001")
                        .bind(status)
                        .execute(&pool)
                        .await
                }
            };

            let (mut inserted, mut duplicates) = (0, 0);
            for outcome in support::race(TASKS, |index| attempt(format!("P{index}"), "PENDING")).await {
                match outcome {
                    Ok(_) => inserted += 1,
                    Err(error) if error.as_database_error().is_some_and(|e| e.is_unique_violation()) => duplicates += 1,
                    Err(other) => panic!("a duplicate must be a unique violation, got {other}"),
                }
            }
            assert_eq!(inserted, 1, "exactly one PENDING row per order");
            assert_eq!(duplicates, TASKS - 1);

            // Other states never conflict; once the pending row is paid a new attempt may pend.
            attempt("C1".to_owned(), "CLOSED").await.expect("closed rows do not conflict");
            attempt("C2".to_owned(), "CLOSED").await.expect("closed rows do not conflict");
            let pay = format!("UPDATE {table} SET status = 'PAID' WHERE status = 'PENDING'");
            sqlx::raw_sql(AssertSqlSafe(pay)).execute(&pool).await.expect("pay");
            attempt("P-next".to_owned(), "PENDING").await.expect("a new pending attempt after payment");
            let again = attempt("P-again".to_owned(), "PENDING").await;
            assert!(again.is_err_and(|error| error.as_database_error().is_some_and(|e| e.is_unique_violation())));

            sqlx::raw_sql(AssertSqlSafe(format!("DROP TABLE {table}"))).execute(&pool).await.expect("drop");
        }
        }
    };
}

#[cfg(feature = "sqlite")]
partial_unique_case!(
    sqlite,
    support::sqlite_store,
    mideng::store::sql::SqlDialect::Sqlite,
    "INSERT INTO {table} (payment_no, tenant_id, order_id, status) VALUES ($1, $2, $3, $4)"
);
#[cfg(feature = "postgres")]
partial_unique_case!(
    postgres,
    support::postgres_store,
    mideng::store::sql::SqlDialect::Postgres,
    "INSERT INTO {table} (payment_no, tenant_id, order_id, status) VALUES ($1, $2, $3, $4)"
);
#[cfg(feature = "mysql")]
partial_unique_case!(
    mysql,
    support::mysql_store,
    mideng::store::sql::SqlDialect::MySql,
    "INSERT INTO {table} (payment_no, tenant_id, order_id, status) VALUES (?, ?, ?, ?)"
);
