//! The service schema on every SQL dialect: the invariants it promises hold even against
//! writes that bypass the application, including concurrent ones.

use mideng::sqlx::{self, AssertSqlSafe};

fn unique(prefix: &str) -> String {
    format!(
        "{prefix}-{}-{}",
        std::process::id(),
        mideng::clock::now_ms()
    )
}

fn is_unique_violation(error: &sqlx::Error) -> bool {
    error
        .as_database_error()
        .is_some_and(|error| error.is_unique_violation())
}

macro_rules! schema_case {
    ($backend:ident, $connect:expr, $migrate:path) => {
        mod $backend {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn the_schema_holds_the_payment_and_wallet_invariants() {
                let pool = $connect.await;
                $migrate(&pool).await.expect("migrate");
                $migrate(&pool).await.expect("migrating twice changes nothing");
                let tenant = unique("t");
                let run = |sql: String| {
                    let pool = pool.clone();
                    async move { sqlx::raw_sql(AssertSqlSafe(sql)).execute(&pool).await }
                };
                let payment = |number: String, status: &str| {
                    format!(
                        "INSERT INTO pay_payments (payment_no, tenant_id, order_id, channel, amount, currency, status, expires_at, created_at, updated_at) \
                         VALUES ('{number}', '{tenant}', 'o1', 'alipay', 100, 'CNY', '{status}', 0, 0, 0)"
                    )
                };

                // One PENDING payment per order, whatever the concurrency.
                let attempts: Vec<_> = (0..16)
                    .map(|index| tokio::spawn(run(payment(format!("{tenant}-P{index}"), "PENDING"))))
                    .collect();
                let mut inserted = 0;
                for attempt in attempts {
                    match attempt.await.expect("task") {
                        Ok(_) => inserted += 1,
                        Err(error) => assert!(is_unique_violation(&error), "{error}"),
                    }
                }
                assert_eq!(inserted, 1, "exactly one pending payment per order");
                run(payment(format!("{tenant}-C1"), "CLOSED")).await.expect("closed attempts never conflict");
                run(payment(format!("{tenant}-C2"), "CLOSED")).await.expect("closed attempts never conflict");

                // At most one PAID payment per order, ever.
                run(format!("UPDATE pay_payments SET status = 'PAID' WHERE tenant_id = '{tenant}' AND status = 'PENDING'"))
                    .await
                    .expect("pay");
                run(payment(format!("{tenant}-P-next"), "PENDING")).await.expect("a new attempt may pend");
                let second_paid = run(format!(
                    "UPDATE pay_payments SET status = 'PAID' WHERE payment_no = '{tenant}-P-next'"
                ))
                .await;
                assert!(second_paid.as_ref().is_err_and(is_unique_violation), "a second paid payment is refused");

                // Balances never go negative, even through a raw update.
                run(format!(
                    "INSERT INTO pay_wallets (tenant_id, user_id, balance, currency, updated_at) VALUES ('{tenant}', 'u1', 100, 'CNY', 0)"
                ))
                .await
                .expect("wallet");
                let overdraw = run(format!(
                    "UPDATE pay_wallets SET balance = balance - 150 WHERE tenant_id = '{tenant}' AND user_id = 'u1'"
                ))
                .await;
                assert!(overdraw.is_err(), "the CHECK refuses a negative balance");
                let balance: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
                    "SELECT balance FROM pay_wallets WHERE tenant_id = '{tenant}' AND user_id = 'u1'"
                )))
                .fetch_one(&pool)
                .await
                .expect("balance");
                assert_eq!(balance, 100);

                // One debit per user + order, one credit per user + reference; a debit's
                // reference (its order) never collides with a credit's.
                let entry = |number: &str, kind: &str, reference: &str, order: &str| {
                    format!(
                        "INSERT INTO pay_wallet_entries (entry_no, tenant_id, user_id, kind, amount, reference, order_id, balance_after, created_at) \
                         VALUES ('{tenant}-{number}', '{tenant}', 'u1', '{kind}', 10, '{reference}', {order}, 90, 0)"
                    )
                };
                run(entry("E1", "CREDIT", "r1", "NULL")).await.expect("credit");
                let credited_twice = run(entry("E2", "CREDIT", "r1", "NULL")).await;
                assert!(credited_twice.as_ref().is_err_and(is_unique_violation), "one credit per reference");
                run(entry("E2b", "CREDIT", "r2", "NULL")).await.expect("a credit for another reference");
                run(entry("E3", "DEBIT", "o1", "'o1'")).await.expect("debit");
                let twice = run(entry("E4", "DEBIT", "o1", "'o1'")).await;
                assert!(twice.as_ref().is_err_and(is_unique_violation), "one debit per order");
                run(entry("E5", "DEBIT", "o2", "'o2'")).await.expect("a debit for another order");
                run(entry("E6", "DEBIT", "r1", "'o3'")).await.expect("a debit never collides with a credit");

                // One grant per payment.
                let grant = |number: &str| {
                    format!(
                        "INSERT INTO pay_grants (grant_no, tenant_id, user_id, payment_no, order_id, sku, quantity, created_at) \
                         VALUES ('{tenant}-{number}', '{tenant}', 'u1', '{tenant}-P0', 'o1', 'vip', 1, 0)"
                    )
                };
                run(grant("G1")).await.expect("grant");
                assert!(run(grant("G2")).await.as_ref().is_err_and(is_unique_violation), "one grant per payment");
            }
        }
    };
}

fn url(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

schema_case!(
    sqlite,
    async {
        let path = std::path::Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("{}.db", unique("schema")));
        let options = sqlx::sqlite::SqliteConnectOptions::new()
            .filename(path)
            .create_if_missing(true)
            .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
            .busy_timeout(std::time::Duration::from_secs(5));
        sqlx::SqlitePool::connect_with(options)
            .await
            .expect("sqlite")
    },
    mideng_pay::store::migrate_sqlite
);
schema_case!(
    postgres,
    async {
        let url = url(
            "MIDENG_TEST_POSTGRES_URL",
            "postgres://mideng:mideng@127.0.0.1:5432/mideng_test",
        );
        sqlx::PgPool::connect(&url)
            .await
            .unwrap_or_else(|error| panic!("postgres at {url} (scripts/services up): {error}"))
    },
    mideng_pay::store::migrate_postgres
);
schema_case!(
    mysql,
    async {
        let url = url(
            "MIDENG_TEST_MYSQL_URL",
            "mysql://mideng:mideng@127.0.0.1:3306/mideng_test",
        );
        sqlx::MySqlPool::connect(&url)
            .await
            .unwrap_or_else(|error| panic!("mysql at {url} (scripts/services up): {error}"))
    },
    mideng_pay::store::migrate_mysql
);
