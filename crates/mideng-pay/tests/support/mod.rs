//! Shared by the service's storage tests: the three dialects' stores on the real servers. Work
//! runs in retried write transactions through the toolkit's `SqlStore::write`, as in the
//! service.

#![allow(dead_code, unused_macros, unreachable_pub)]

use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;

/// A name no other test uses.
pub fn unique(prefix: &str) -> String {
    let mut bytes = [0_u8; 6];
    getrandom::fill(&mut bytes).expect("random");
    format!("{prefix}-{}", hex::encode(bytes))
}

/// Generates `<backend>::<case>` tests for each listed case (a function generic over the
/// dialect taking its store).
#[macro_export]
macro_rules! dialect_suite {
    ($($case:ident),* $(,)?) => {
        mod sqlite {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() { super::$case(super::support::sqlite().await).await; } )*
        }
        mod postgres {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() { super::$case(super::support::postgres().await).await; } )*
        }
        mod mysql {
            $( #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn $case() { super::$case(super::support::mysql().await).await; } )*
        }
    };
}

fn settings() -> PoolSettings {
    PoolSettings {
        connections_max: 8,
        ..PoolSettings::default()
    }
}

fn url(variable: &str, default: &str) -> String {
    std::env::var(variable).unwrap_or_else(|_| default.to_owned())
}

pub async fn sqlite() -> SqliteStore {
    let path =
        std::path::Path::new(env!("CARGO_TARGET_TMPDIR")).join(format!("{}.db", unique("pay")));
    let store = SqliteStore::connect(&format!("sqlite://{}", path.display()), settings())
        .await
        .expect("sqlite");
    store.migrate().await.expect("toolkit tables");
    mideng_pay::store::migrate_sqlite(store.pool())
        .await
        .expect("migrate");
    store
}

pub async fn postgres() -> PostgresStore {
    let url = url(
        "MIDENG_TEST_POSTGRES_URL",
        "postgres://mideng:mideng@127.0.0.1:5432/mideng_test",
    );
    let store = PostgresStore::connect(&url, settings())
        .await
        .unwrap_or_else(|error| panic!("postgres at {url} (scripts/services up): {error}"));
    store.migrate().await.expect("toolkit tables");
    mideng_pay::store::migrate_postgres(store.pool())
        .await
        .expect("migrate");
    store
}

pub async fn mysql() -> MySqlStore {
    let url = url(
        "MIDENG_TEST_MYSQL_URL",
        "mysql://mideng:mideng@127.0.0.1:3306/mideng_test",
    );
    let store = MySqlStore::connect(&url, settings())
        .await
        .unwrap_or_else(|error| panic!("mysql at {url} (scripts/services up): {error}"));
    store.migrate().await.expect("toolkit tables");
    mideng_pay::store::migrate_mysql(store.pool())
        .await
        .expect("migrate");
    store
}
