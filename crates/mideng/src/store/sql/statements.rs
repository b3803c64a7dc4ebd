//! The one way the SQL adapters write a statement whose text differs between dialects.
//!
//! A statement is a [`PerDialect`] constant: its text for PostgreSQL, MySQL/MariaDB and SQLite,
//! chosen where it runs with [`PerDialect::get`] by the dialect's [`Dialect::KIND`]. The text
//! is written once with [`dialect_sql!`](crate::dialect_sql), which numbers the placeholders
//! (`$1`, `$2`, … or `?`) and fills in the few fragments that differ. Every text is a
//! `&'static str` built at compile time, so a statement costs nothing at run time and the
//! port ([`super::SqlConn`]) keeps taking `&'static str`.
//!
//! The toolkit's records, tokens, locks, states, outbox and queue are written so, each beside
//! the code that runs it; an application on the toolkit writes its own statements the same way.

use super::engine::{Dialect, SqlDialect};

/// One value for each SQL dialect, usually the text of one statement. Built with
/// [`dialect_sql!`](crate::dialect_sql), or field by field where the dialects' texts share
/// nothing.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PerDialect<T> {
    /// For PostgreSQL.
    pub postgres: T,
    /// For MySQL and MariaDB.
    pub mysql: T,
    /// For SQLite.
    pub sqlite: T,
}

impl<T: Copy> PerDialect<T> {
    /// The value for dialect `D`: `INSERT.get::<D>()`.
    pub const fn get<D: Dialect>(self) -> T {
        self.of(D::KIND)
    }

    /// The value for `dialect`.
    pub const fn of(self, dialect: SqlDialect) -> T {
        match dialect {
            SqlDialect::Postgres => self.postgres,
            SqlDialect::MySql => self.mysql,
            SqlDialect::Sqlite => self.sqlite,
        }
    }
}

/// Writes one statement for every dialect: a [`PerDialect<&'static str>`](PerDialect) built at
/// compile time from a template of space-separated pieces:
///
/// - a string literal, copied as it is;
/// - `?`, a parameter: `$1`, `$2`, … in order on PostgreSQL and SQLite, `?` on MySQL. The
///   engine binds arguments by position, so each parameter is used once, in the order of the
///   argument list (at most 32 per statement);
/// - `for_update`: ` FOR UPDATE`, nothing on SQLite, whose `BEGIN IMMEDIATE` already holds the
///   write lock;
/// - `skip_locked`: ` FOR UPDATE SKIP LOCKED`, nothing on SQLite;
/// - `insert_ignore` … `on_conflict_ignore`: an insert that does nothing on a duplicate key —
///   `INSERT INTO … ON CONFLICT DO NOTHING`, `INSERT IGNORE INTO …` on MySQL;
/// - `name!(…)`: a macro that expands to a string literal (a column list written once);
/// - `{ mysql: "…", _: "…" }`: a fragment per dialect, by name (`postgres`, `mysql`, `sqlite`),
///   `_` for every dialect not named before it.
///
/// ```
/// use mideng::dialect_sql;
/// use mideng::store::sql::{PerDialect, SqlDialect};
///
/// const LOCKED_BALANCE: PerDialect<&str> = dialect_sql!(
///     "SELECT balance FROM wallets WHERE tenant_id = " ? " AND user_id = " ? for_update
/// );
/// assert_eq!(
///     LOCKED_BALANCE.of(SqlDialect::Postgres),
///     "SELECT balance FROM wallets WHERE tenant_id = $1 AND user_id = $2 FOR UPDATE"
/// );
/// assert_eq!(
///     LOCKED_BALANCE.of(SqlDialect::MySql),
///     "SELECT balance FROM wallets WHERE tenant_id = ? AND user_id = ? FOR UPDATE"
/// );
/// assert_eq!(
///     LOCKED_BALANCE.of(SqlDialect::Sqlite),
///     "SELECT balance FROM wallets WHERE tenant_id = $1 AND user_id = $2"
/// );
/// ```
#[macro_export]
macro_rules! dialect_sql {
    // The placeholders of the numbered dialects, consumed one per `?`.
    (@numbered $dialect:ident $($piece:tt)+) => {
        $crate::dialect_sql!(@text $dialect [
            "$1" "$2" "$3" "$4" "$5" "$6" "$7" "$8" "$9" "$10" "$11" "$12" "$13" "$14" "$15" "$16"
            "$17" "$18" "$19" "$20" "$21" "$22" "$23" "$24" "$25" "$26" "$27" "$28" "$29" "$30"
            "$31" "$32"
        ] [] $($piece)+)
    };

    // `@text dialect [placeholders left] [text so far] pieces…`
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*]) => {
        concat!($($text)*)
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] $literal:literal $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)* $literal,] $($rest)*)
    };
    (@text mysql [] [$($text:tt)*] ? $($rest:tt)*) => {
        $crate::dialect_sql!(@text mysql [] [$($text)* "?",] $($rest)*)
    };
    (@text $dialect:ident [$next:literal $($left:literal)*] [$($text:tt)*] ? $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)* $next,] $($rest)*)
    };
    (@text $dialect:ident [] [$($text:tt)*] ? $($rest:tt)*) => {
        compile_error!("dialect_sql!: more than 32 parameters in one statement")
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] for_update $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)*]
            { sqlite: "", _: " FOR UPDATE" } $($rest)*)
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] skip_locked $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)*]
            { sqlite: "", _: " FOR UPDATE SKIP LOCKED" } $($rest)*)
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] insert_ignore $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)*]
            { mysql: "INSERT IGNORE INTO", _: "INSERT INTO" } $($rest)*)
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] on_conflict_ignore $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)*]
            { mysql: "", _: " ON CONFLICT DO NOTHING" } $($rest)*)
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] $macro:ident ! $arguments:tt $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*] [$($text)* $macro! $arguments,] $($rest)*)
    };
    (@text $dialect:ident [$($left:literal)*] [$($text:tt)*] { $($choices:tt)* } $($rest:tt)*) => {
        $crate::dialect_sql!(@text $dialect [$($left)*]
            [$($text)* $crate::dialect_sql!(@pick $dialect $($choices)*),] $($rest)*)
    };

    // `@pick dialect name: "text", …`: the first text named for the dialect, or `_`.
    (@pick postgres postgres : $choice:literal $(, $($rest:tt)*)?) => { $choice };
    (@pick mysql mysql : $choice:literal $(, $($rest:tt)*)?) => { $choice };
    (@pick sqlite sqlite : $choice:literal $(, $($rest:tt)*)?) => { $choice };
    (@pick $dialect:ident _ : $choice:literal $(,)?) => { $choice };
    (@pick $dialect:ident $other:ident : $choice:literal $(, $($rest:tt)*)?) => {
        $crate::dialect_sql!(@pick $dialect $($($rest)*)?)
    };
    (@pick $dialect:ident) => {
        compile_error!("dialect_sql!: a `{ … }` fragment names no text for every dialect; add `_: \"…\"`")
    };

    // The entry, last so that the internal rules above are tried first.
    ($($piece:tt)+) => {
        $crate::store::sql::PerDialect {
            postgres: $crate::dialect_sql!(@numbered postgres $($piece)+),
            mysql: $crate::dialect_sql!(@text mysql [] [] $($piece)+),
            sqlite: $crate::dialect_sql!(@numbered sqlite $($piece)+),
        }
    };
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn placeholders_are_numbered_in_order_or_left_as_question_marks() {
        let insert = crate::dialect_sql!(
            insert_ignore " t (a, b, c) VALUES (" ? ", " ? ", " ? ")" on_conflict_ignore
        );
        assert_eq!(
            insert.of(SqlDialect::Postgres),
            "INSERT INTO t (a, b, c) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING"
        );
        assert_eq!(insert.sqlite, insert.postgres);
        assert_eq!(
            insert.of(SqlDialect::MySql),
            "INSERT IGNORE INTO t (a, b, c) VALUES (?, ?, ?)"
        );
    }

    #[test]
    fn a_named_fragment_wins_over_the_default() {
        let purge = crate::dialect_sql!(
            "DELETE FROM t WHERE at <= " ? { postgres: " LIMIT", sqlite: " LIMIT", _: " ORDER BY at LIMIT" } " " ? skip_locked
        );
        assert_eq!(
            purge.postgres,
            "DELETE FROM t WHERE at <= $1 LIMIT $2 FOR UPDATE SKIP LOCKED"
        );
        assert_eq!(
            purge.mysql,
            "DELETE FROM t WHERE at <= ? ORDER BY at LIMIT ? FOR UPDATE SKIP LOCKED"
        );
        assert_eq!(purge.sqlite, "DELETE FROM t WHERE at <= $1 LIMIT $2");
    }

    #[test]
    fn thirty_two_parameters_fit() {
        let wide = crate::dialect_sql!(
            ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ? ?
        );
        assert!(wide.postgres.ends_with("$31$32"));
        assert_eq!(wide.mysql, "?".repeat(32));
    }
}
