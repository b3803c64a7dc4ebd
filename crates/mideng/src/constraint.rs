//! Partial unique constraints: "unique, but only while in one state".
//!
//! The rule "at most one PENDING payment per order" cannot be a plain unique index, since an
//! order may have many CLOSED attempts. It must bind only while a row is in one state, and it
//! must be the database that enforces it: two instances racing to create a payment both pass
//! any check made in application code. This module writes the constraint for each dialect:
//!
//! - PostgreSQL and SQLite: a partial unique index, `CREATE UNIQUE INDEX … WHERE state = 'v'`;
//! - MySQL / MariaDB, which have no partial indexes: a stored generated column that is `1` in
//!   the bound state and `NULL` otherwise, and a unique index over the columns plus that flag.
//!   A unique index admits any number of `NULL`s, so rows in other states never conflict. This
//!   is the technique of `IF(status = 0, order_id, NULL)` with a unique index, generalised to
//!   several columns.
//!
//! Insert with the dialect's "do nothing on conflict" form, or catch the violation with
//! sqlx's `is_unique_violation()` outside a PostgreSQL transaction (inside one it aborts the
//! transaction), and then read the row that won: a duplicate is an answer, never an error.

use crate::error::InvalidInput;

/// The dialect a constraint is written for; it belongs to the SQL adapters, where each
/// [`Dialect`](crate::store::sql::Dialect) names its own, and is re-exported here because
/// [`PartialUnique::ddl`] takes it.
pub use crate::store::sql::SqlDialect;

/// Longest identifier accepted (PostgreSQL's limit; MySQL allows 64).
const IDENTIFIER_BYTES_MAX: usize = 63;

/// A unique constraint over `columns` that binds only while `state_column = state_value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PartialUnique {
    name: String,
    table: String,
    columns: Vec<String>,
    state_column: String,
    state_value: String,
}

fn identifier(text: &str, what: &'static str) -> Result<String, InvalidInput> {
    let valid = !text.is_empty()
        && text.len() <= IDENTIFIER_BYTES_MAX
        && text
            .bytes()
            .next()
            .is_some_and(|byte| byte.is_ascii_lowercase() || byte == b'_')
        && text
            .bytes()
            .all(|byte| byte.is_ascii_lowercase() || byte.is_ascii_digit() || byte == b'_');
    if valid {
        Ok(text.to_owned())
    } else {
        Err(InvalidInput::Malformed {
            what,
            max_bytes: IDENTIFIER_BYTES_MAX,
            alphabet: "lowercase letters, digits and _, not starting with a digit",
        })
    }
}

impl PartialUnique {
    /// Declares the constraint. Every name is a plain lowercase SQL identifier and the state
    /// value is letters, digits and `_` (it is written into the DDL as a literal, so it is
    /// validated instead of quoted).
    pub fn new(
        name: &str,
        table: &str,
        columns: &[&str],
        state_column: &str,
        state_value: &str,
    ) -> Result<Self, InvalidInput> {
        if columns.is_empty() {
            return Err(InvalidInput::Malformed {
                what: "constraint columns",
                max_bytes: IDENTIFIER_BYTES_MAX,
                alphabet: "at least one column",
            });
        }
        let state_value_valid = !state_value.is_empty()
            && state_value.len() <= IDENTIFIER_BYTES_MAX
            && state_value
                .bytes()
                .all(|byte| byte.is_ascii_alphanumeric() || byte == b'_');
        if !state_value_valid {
            return Err(InvalidInput::Malformed {
                what: "state value",
                max_bytes: IDENTIFIER_BYTES_MAX,
                alphabet: "letters, digits and _",
            });
        }
        Ok(Self {
            name: identifier(name, "constraint name")?,
            table: identifier(table, "table name")?,
            columns: columns
                .iter()
                .map(|column| identifier(column, "column name"))
                .collect::<Result<_, _>>()?,
            state_column: identifier(state_column, "state column")?,
            state_value: state_value.to_owned(),
        })
    }

    /// The name of the generated flag column on MySQL.
    pub fn flag_column(&self) -> String {
        format!("{}_flag", self.name)
    }

    /// The statements that create the constraint, to run once in a migration.
    pub fn ddl(&self, dialect: SqlDialect) -> Vec<String> {
        let columns = self.columns.join(", ");
        match dialect {
            SqlDialect::Postgres | SqlDialect::Sqlite => vec![format!(
                "CREATE UNIQUE INDEX IF NOT EXISTS {name} ON {table} ({columns}) WHERE {state} = '{value}'",
                name = self.name,
                table = self.table,
                state = self.state_column,
                value = self.state_value,
            )],
            SqlDialect::MySql => vec![
                format!(
                    "ALTER TABLE {table} ADD COLUMN {flag} TINYINT GENERATED ALWAYS AS \
                     (IF({state} = '{value}', 1, NULL)) STORED",
                    table = self.table,
                    flag = self.flag_column(),
                    state = self.state_column,
                    value = self.state_value,
                ),
                format!(
                    "CREATE UNIQUE INDEX {name} ON {table} ({columns}, {flag})",
                    name = self.name,
                    table = self.table,
                    flag = self.flag_column(),
                ),
            ],
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn one_pending() -> PartialUnique {
        PartialUnique::new(
            "payments_one_pending",
            "payments",
            &["tenant_id", "order_id"],
            "status",
            "PENDING",
        )
        .expect("valid constraint")
    }

    #[test]
    fn postgres_and_sqlite_get_a_partial_index() {
        let ddl = one_pending().ddl(SqlDialect::Postgres);
        assert_eq!(
            ddl,
            vec![
                "CREATE UNIQUE INDEX IF NOT EXISTS payments_one_pending ON payments (tenant_id, order_id) \
                 WHERE status = 'PENDING'"
            ]
        );
        assert_eq!(one_pending().ddl(SqlDialect::Sqlite), ddl);
    }

    #[test]
    fn mysql_gets_a_generated_flag_and_a_unique_index() {
        let ddl = one_pending().ddl(SqlDialect::MySql);
        assert!(ddl[0].contains("payments_one_pending_flag TINYINT GENERATED ALWAYS AS (IF(status = 'PENDING', 1, NULL)) STORED"));
        assert_eq!(
            ddl[1],
            "CREATE UNIQUE INDEX payments_one_pending ON payments (tenant_id, order_id, payments_one_pending_flag)"
        );
    }

    #[test]
    fn names_and_values_that_could_inject_sql_are_refused() {
        assert!(PartialUnique::new("x", "payments; DROP TABLE y", &["a"], "s", "P").is_err());
        assert!(PartialUnique::new("x", "payments", &["a"], "s", "P' OR '1'='1").is_err());
        assert!(PartialUnique::new("x", "payments", &[], "s", "P").is_err());
        assert!(PartialUnique::new("X", "payments", &["a"], "s", "P").is_err());
    }
}
