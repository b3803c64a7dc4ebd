//! The service's schema per SQL dialect, in `migrations/<dialect>/`, and how it is applied.
//!
//! Each dialect holds the service's invariants that a database can hold: one
//! PENDING and at most one PAID payment per order (partial unique indexes; on MySQL, generated
//! flags under unique indexes), balances never negative (CHECK), one debit per user + order,
//! one credit per user + reference, one grant per payment, one payment per channel trade, one
//! refund per tenant + request key, and a payment's open refunds never above its amount (a
//! running total under a CHECK); each wallet carries a version for the optimistic deduct. The service's bookkeeping table is
//! `mideng_pay_migrations`, apart from the toolkit's.

use mideng::store::sql::versioned_migrator;
use mideng::{StoreError, sqlx};

/// Where the service records which of its migrations ran.
const MIGRATIONS_TABLE: &str = "mideng_pay_migrations";

fn failed(error: sqlx::migrate::MigrateError) -> StoreError {
    StoreError::Backend(Box::new(error))
}

/// Creates or upgrades the service's tables on PostgreSQL.
pub async fn migrate_postgres(pool: &sqlx::PgPool) -> Result<(), StoreError> {
    versioned_migrator(
        MIGRATIONS_TABLE,
        &[
            (
                1,
                "service",
                include_str!("../../migrations/postgres/0001_service.sql"),
            ),
            (
                2,
                "one credit per reference",
                include_str!("../../migrations/postgres/0002_one_credit_per_reference.sql"),
            ),
            (
                3,
                "wallet version",
                include_str!("../../migrations/postgres/0003_wallet_version.sql"),
            ),
            (
                4,
                "refunds",
                include_str!("../../migrations/postgres/0004_refunds.sql"),
            ),
            (
                5,
                "webhooks",
                include_str!("../../migrations/postgres/0005_webhooks.sql"),
            ),
            (
                6,
                "refund cases, grant revocation",
                include_str!("../../migrations/postgres/0006_refund_cases.sql"),
            ),
            (
                7,
                "publishable keys",
                include_str!("../../migrations/postgres/0007_key_kinds.sql"),
            ),
            (
                8,
                "bill cases",
                include_str!("../../migrations/postgres/0008_bill_cases.sql"),
            ),
            (
                9,
                "parked events",
                include_str!("../../migrations/postgres/0009_parked_events.sql"),
            ),
            (
                10,
                "webhook retention",
                include_str!("../../migrations/postgres/0010_webhook_retention.sql"),
            ),
            (
                11,
                "order lock fence",
                include_str!("../../migrations/postgres/0011_order_fence.sql"),
            ),
            (
                12,
                "ledger order",
                include_str!("../../migrations/postgres/0012_entry_wallet_version.sql"),
            ),
            (
                13,
                "webhook secret rotation",
                include_str!("../../migrations/postgres/0013_webhook_secret_rotation.sql"),
            ),
            (
                14,
                "event log",
                include_str!("../../migrations/postgres/0014_event_log.sql"),
            ),
            (
                15,
                "tenant lists",
                include_str!("../../migrations/postgres/0015_tenant_lists.sql"),
            ),
            (
                16,
                "order list",
                include_str!("../../migrations/postgres/0016_order_list.sql"),
            ),
            (
                17,
                "client secrets",
                include_str!("../../migrations/postgres/0017_client_secrets.sql"),
            ),
        ],
    )
    .run(pool)
    .await
    .map_err(failed)
}

/// Creates or upgrades the service's tables on MySQL or MariaDB, serialised across instances
/// (see `mideng::store::sql::mysql::migrate_serialized`: sqlx's own lock does not hold on
/// MariaDB).
pub async fn migrate_mysql(pool: &sqlx::MySqlPool) -> Result<(), StoreError> {
    let migrator = versioned_migrator(
        MIGRATIONS_TABLE,
        &[
            (
                1,
                "service",
                include_str!("../../migrations/mysql/0001_service.sql"),
            ),
            (
                2,
                "one credit per reference",
                include_str!("../../migrations/mysql/0002_one_credit_per_reference.sql"),
            ),
            (
                3,
                "wallet version",
                include_str!("../../migrations/mysql/0003_wallet_version.sql"),
            ),
            (
                4,
                "refunds",
                include_str!("../../migrations/mysql/0004_refunds.sql"),
            ),
            (
                5,
                "webhooks",
                include_str!("../../migrations/mysql/0005_webhooks.sql"),
            ),
            (
                6,
                "refund cases, grant revocation",
                include_str!("../../migrations/mysql/0006_refund_cases.sql"),
            ),
            (
                7,
                "publishable keys",
                include_str!("../../migrations/mysql/0007_key_kinds.sql"),
            ),
            (
                8,
                "bill cases",
                include_str!("../../migrations/mysql/0008_bill_cases.sql"),
            ),
            (
                9,
                "parked events",
                include_str!("../../migrations/mysql/0009_parked_events.sql"),
            ),
            (
                10,
                "webhook retention",
                include_str!("../../migrations/mysql/0010_webhook_retention.sql"),
            ),
            (
                11,
                "order lock fence",
                include_str!("../../migrations/mysql/0011_order_fence.sql"),
            ),
            (
                12,
                "ledger order",
                include_str!("../../migrations/mysql/0012_entry_wallet_version.sql"),
            ),
            (
                13,
                "webhook secret rotation",
                include_str!("../../migrations/mysql/0013_webhook_secret_rotation.sql"),
            ),
            (
                14,
                "event log",
                include_str!("../../migrations/mysql/0014_event_log.sql"),
            ),
            (
                15,
                "tenant lists",
                include_str!("../../migrations/mysql/0015_tenant_lists.sql"),
            ),
            (
                16,
                "order list",
                include_str!("../../migrations/mysql/0016_order_list.sql"),
            ),
            (
                17,
                "client secrets",
                include_str!("../../migrations/mysql/0017_client_secrets.sql"),
            ),
        ],
    );
    mideng::store::sql::mysql::migrate_serialized(pool, migrator).await
}

/// Creates or upgrades the service's tables on SQLite.
pub async fn migrate_sqlite(pool: &sqlx::SqlitePool) -> Result<(), StoreError> {
    versioned_migrator(
        MIGRATIONS_TABLE,
        &[
            (
                1,
                "service",
                include_str!("../../migrations/sqlite/0001_service.sql"),
            ),
            (
                2,
                "one credit per reference",
                include_str!("../../migrations/sqlite/0002_one_credit_per_reference.sql"),
            ),
            (
                3,
                "wallet version",
                include_str!("../../migrations/sqlite/0003_wallet_version.sql"),
            ),
            (
                4,
                "refunds",
                include_str!("../../migrations/sqlite/0004_refunds.sql"),
            ),
            (
                5,
                "webhooks",
                include_str!("../../migrations/sqlite/0005_webhooks.sql"),
            ),
            (
                6,
                "refund cases, grant revocation",
                include_str!("../../migrations/sqlite/0006_refund_cases.sql"),
            ),
            (
                7,
                "publishable keys",
                include_str!("../../migrations/sqlite/0007_key_kinds.sql"),
            ),
            (
                8,
                "bill cases",
                include_str!("../../migrations/sqlite/0008_bill_cases.sql"),
            ),
            (
                9,
                "parked events",
                include_str!("../../migrations/sqlite/0009_parked_events.sql"),
            ),
            (
                10,
                "webhook retention",
                include_str!("../../migrations/sqlite/0010_webhook_retention.sql"),
            ),
            (
                11,
                "order lock fence",
                include_str!("../../migrations/sqlite/0011_order_fence.sql"),
            ),
            (
                12,
                "ledger order",
                include_str!("../../migrations/sqlite/0012_entry_wallet_version.sql"),
            ),
            (
                13,
                "webhook secret rotation",
                include_str!("../../migrations/sqlite/0013_webhook_secret_rotation.sql"),
            ),
            (
                14,
                "event log",
                include_str!("../../migrations/sqlite/0014_event_log.sql"),
            ),
            (
                15,
                "tenant lists",
                include_str!("../../migrations/sqlite/0015_tenant_lists.sql"),
            ),
            (
                16,
                "order list",
                include_str!("../../migrations/sqlite/0016_order_list.sql"),
            ),
            (
                17,
                "client secrets",
                include_str!("../../migrations/sqlite/0017_client_secrets.sql"),
            ),
        ],
    )
    .run(pool)
    .await
    .map_err(failed)
}
