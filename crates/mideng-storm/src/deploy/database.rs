//! The run's own database: created beside the one the servers stack names, dropped after.

use anyhow::Context;
use mideng_pay::testing::create_database;

/// Whether `url` names a MySQL or MariaDB database.
pub fn is_mysql(url: &str) -> bool {
    url.starts_with("mysql:") || url.starts_with("mariadb:")
}

/// A database name made of lowercase letters, digits and `_` only, so that it can be spliced
/// into `CREATE DATABASE` and `DROP DATABASE` (neither takes a bound parameter).
fn database_name(name: &str) -> String {
    name.chars()
        .map(|character| {
            if character.is_ascii_alphanumeric() {
                character.to_ascii_lowercase()
            } else {
                '_'
            }
        })
        .collect()
}

/// Creates a database named after `name` beside the one `server_url` names and returns its
/// URL: on PostgreSQL through `mideng_pay::testing`, on MySQL / MariaDB here (the service's
/// test support creates PostgreSQL databases only).
pub(super) async fn create_run_database(server_url: &str, name: &str) -> anyhow::Result<String> {
    use mideng::sqlx::Connection;
    if !is_mysql(server_url) {
        return Ok(create_database(server_url, name).await?);
    }
    let server_url = server_url.replacen("mariadb://", "mysql://", 1);
    let name = database_name(name);
    let (prefix, _) = server_url
        .rsplit_once('/')
        .context("the database URL names no database")?;
    let mut admin = mideng::sqlx::MySqlConnection::connect(&server_url)
        .await
        .context("the MySQL server")?;
    mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(format!(
        "CREATE DATABASE {name}"
    )))
    .execute(&mut admin)
    .await
    .with_context(|| format!("creating the database {name}"))?;
    Ok(format!("{prefix}/{name}"))
}

/// Drops the database of `url`, a run's database created beside the one `server_url` names
/// (connections still open to it are closed: PostgreSQL's `WITH (FORCE)`; MySQL drops it once
/// their transactions end, and a stopped deployment has none).
pub async fn drop_run_database(server_url: &str, url: &str) -> anyhow::Result<()> {
    use mideng::sqlx::Connection;
    let name = url
        .rsplit_once('/')
        .map(|(_, name)| name)
        .filter(|name| !name.is_empty() && database_name(name) == *name)
        .with_context(|| format!("no database name in {}", mideng::redact::url(url)))?;
    if is_mysql(server_url) {
        let server_url = server_url.replacen("mariadb://", "mysql://", 1);
        let mut admin = mideng::sqlx::MySqlConnection::connect(&server_url).await?;
        mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name}"
        )))
        .execute(&mut admin)
        .await?;
    } else {
        let mut admin = mideng::sqlx::PgConnection::connect(server_url).await?;
        mideng::sqlx::raw_sql(mideng::sqlx::AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS {name} WITH (FORCE)"
        )))
        .execute(&mut admin)
        .await?;
    }
    Ok(())
}
