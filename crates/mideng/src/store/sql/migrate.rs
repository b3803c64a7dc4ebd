//! Schema migrations and pool settings for the SQL stores.
//!
//! The toolkit's tables are created by its own migrator, whose bookkeeping lives in
//! `mideng_migrations`; an application on the toolkit builds its migrator with
//! [`versioned_migrator`] and a table of its own, so that the two histories never mix in one
//! database.

use std::time::Duration;

/// Builds a migrator from versioned SQL scripts, keeping its bookkeeping in `table` so that it
/// never mixes with another migrator's in the same database (the toolkit uses
/// `mideng_migrations`; an application on the toolkit picks its own). Each script is
/// `(version, description, sql)`.
pub fn versioned_migrator(
    table: &'static str,
    scripts: &[(i64, &'static str, &'static str)],
) -> sqlx::migrate::Migrator {
    use sqlx::SqlSafeStr;
    use sqlx::migrate::{Migration, MigrationType, Migrator};
    let mut migrator = Migrator::with_migrations(
        scripts
            .iter()
            .map(|(version, description, sql)| {
                Migration::new(
                    *version,
                    (*description).into(),
                    MigrationType::Simple,
                    sql.into_sql_str(),
                    false,
                )
            })
            .collect(),
    );
    migrator.dangerous_set_table_name(table);
    migrator
}

/// What each of the toolkit's migrations does, in order: version `n` is entry `n - 1`.
const TOOLKIT_MIGRATIONS: [&str; 6] = [
    "toolkit",
    "outbox",
    "token limits",
    "outbox parking",
    "token binding",
    "lock slots",
];

/// The toolkit's own migrator for one dialect, from its scripts in version order.
pub(crate) fn migrator(scripts: [&'static str; 6]) -> sqlx::migrate::Migrator {
    let versioned: Vec<(i64, &'static str, &'static str)> = TOOLKIT_MIGRATIONS
        .iter()
        .zip(scripts)
        .zip(1_i64..)
        .map(|((description, sql), version)| (version, *description, sql))
        .collect();
    versioned_migrator("mideng_migrations", &versioned)
}

/// Pool settings shared by the SQL stores.
#[derive(Clone, Copy, Debug)]
pub struct PoolSettings {
    /// Most connections open at once.
    pub connections_max: u32,
    /// Longest wait for a free connection before the store reports itself unavailable.
    pub acquire_timeout: Duration,
}

impl Default for PoolSettings {
    fn default() -> Self {
        Self {
            connections_max: 16,
            acquire_timeout: Duration::from_secs(10),
        }
    }
}
