//! The service's SQL, per dialect. Parameters are positional and each is used once, in order,
//! so that one argument list serves `$n` (PostgreSQL, SQLite) and `?` (MySQL) dialects.

use mideng::store::sql::Dialect;
use mideng::store::sql::mysql::MySqlDialect;
use mideng::store::sql::postgres::PostgresDialect;
use mideng::store::sql::sqlite::SqliteDialect;

/// Every statement of the service's storage, in one dialect.
#[derive(Debug)]
pub struct PayStatements {
    pub(crate) order_insert: &'static str,
    pub(crate) order_select: &'static str,
    pub(crate) order_select_locked: &'static str,
    pub(crate) order_compare_and_set: &'static str,
    pub(crate) payment_insert: &'static str,
    pub(crate) payment_select_pending_locked: &'static str,
    pub(crate) payment_select: &'static str,
    pub(crate) payment_select_locked: &'static str,
    pub(crate) payment_mark_paid: &'static str,
    pub(crate) wallet_insert: &'static str,
    pub(crate) wallet_select_locked: &'static str,
    pub(crate) wallet_set_balance: &'static str,
    pub(crate) entry_insert: &'static str,
    pub(crate) entry_select_debit: &'static str,
    pub(crate) entry_select_credit: &'static str,
    pub(crate) tenant_insert: &'static str,
    pub(crate) tenant_set_key: &'static str,
    pub(crate) tenant_select_by_key: &'static str,
    pub(crate) payment_select_by_order: &'static str,
    pub(crate) payment_select_paid_for_order: &'static str,
    pub(crate) payment_set_pay_url: &'static str,
    pub(crate) payment_compare_and_set: &'static str,
    pub(crate) wallet_select: &'static str,
    pub(crate) entries_select: &'static str,
    pub(crate) payment_select_pending_before: &'static str,
    pub(crate) payment_select_pending_before_for_tenant: &'static str,
}

/// A toolkit dialect with the service's statements.
pub trait PayDialect: Dialect {
    /// The statements.
    fn pay_statements() -> &'static PayStatements;
}

macro_rules! payment_columns {
    () => {
        "payment_no, tenant_id, order_id, channel, amount, currency, status, pay_url, expires_at, channel_trade_no, paid_at, created_at"
    };
}

macro_rules! statements {
    (insert_ignore: $insert:literal, on_conflict: $conflict:literal, locked: $locked:literal, p: [$($p:literal),*]) => {{
        // `p` lists the placeholders in order: $1… or ?….
        statements!(@build $insert, $conflict, $locked, [$($p),*])
    }};
    (@build $insert:literal, $conflict:literal, $locked:literal, [$p1:literal, $p2:literal, $p3:literal, $p4:literal, $p5:literal, $p6:literal, $p7:literal, $p8:literal, $p9:literal, $p10:literal, $p11:literal, $p12:literal]) => {
        PayStatements {
            order_insert: concat!(
                $insert, " pay_orders (tenant_id, order_id, user_id, amount, currency, status, entitlement_sku, entitlement_quantity, fingerprint, created_at, updated_at) VALUES (",
                $p1, ", ", $p2, ", ", $p3, ", ", $p4, ", ", $p5, ", 'CREATED', ", $p6, ", ", $p7, ", ", $p8, ", ", $p9, ", ", $p10, ")", $conflict
            ),
            order_select: concat!("SELECT ", "user_id, amount, currency, status, entitlement_sku, entitlement_quantity, fingerprint, version", " FROM pay_orders WHERE tenant_id = ", $p1, " AND order_id = ", $p2),
            order_select_locked: concat!("SELECT ", "user_id, amount, currency, status, entitlement_sku, entitlement_quantity, fingerprint, version", " FROM pay_orders WHERE tenant_id = ", $p1, " AND order_id = ", $p2, $locked),
            order_compare_and_set: concat!(
                "UPDATE pay_orders SET status = ", $p1, ", version = version + 1, updated_at = ", $p2,
                " WHERE tenant_id = ", $p3, " AND order_id = ", $p4, " AND status = ", $p5
            ),
            payment_insert: concat!(
                $insert, " pay_payments (", payment_columns!(), ", updated_at) VALUES (",
                $p1, ", ", $p2, ", ", $p3, ", ", $p4, ", ", $p5, ", ", $p6, ", 'PENDING', ", $p7, ", ", $p8, ", NULL, NULL, ", $p9, ", ", $p10, ")", $conflict
            ),
            payment_select_pending_locked: concat!("SELECT ", payment_columns!(), " FROM pay_payments WHERE tenant_id = ", $p1, " AND order_id = ", $p2, " AND status = 'PENDING'", $locked),
            payment_select: concat!("SELECT ", payment_columns!(), " FROM pay_payments WHERE payment_no = ", $p1),
            payment_select_locked: concat!("SELECT ", payment_columns!(), " FROM pay_payments WHERE payment_no = ", $p1, $locked),
            payment_mark_paid: concat!(
                "UPDATE pay_payments SET status = 'PAID', channel_trade_no = ", $p1, ", paid_at = ", $p2, ", updated_at = ", $p3,
                " WHERE payment_no = ", $p4, " AND status = ", $p5
            ),
            wallet_insert: concat!(
                $insert, " pay_wallets (tenant_id, user_id, balance, currency, updated_at) VALUES (",
                $p1, ", ", $p2, ", 0, 'CNY', ", $p3, ")", $conflict
            ),
            wallet_select_locked: concat!("SELECT balance FROM pay_wallets WHERE tenant_id = ", $p1, " AND user_id = ", $p2, $locked),
            wallet_set_balance: concat!(
                "UPDATE pay_wallets SET balance = ", $p1, ", updated_at = ", $p2, " WHERE tenant_id = ", $p3, " AND user_id = ", $p4
            ),
            entry_insert: concat!(
                $insert, " pay_wallet_entries (entry_no, tenant_id, user_id, kind, amount, reference, order_id, balance_after, created_at) VALUES (",
                $p1, ", ", $p2, ", ", $p3, ", ", $p4, ", ", $p5, ", ", $p6, ", ", $p7, ", ", $p8, ", ", $p9, ")", $conflict
            ),
            entry_select_debit: concat!(
                "SELECT entry_no, amount, balance_after, created_at FROM pay_wallet_entries WHERE tenant_id = ", $p1,
                " AND user_id = ", $p2, " AND order_id = ", $p3, " AND kind = 'DEBIT'"
            ),
            entry_select_credit: concat!(
                "SELECT entry_no, amount, balance_after, created_at FROM pay_wallet_entries WHERE tenant_id = ", $p1,
                " AND user_id = ", $p2, " AND reference = ", $p3, " AND kind = 'CREDIT'"
            ),
            tenant_insert: concat!(
                $insert, " pay_tenants (tenant_id, api_key_hash, created_at) VALUES (", $p1, ", ", $p2, ", ", $p3, ")", $conflict
            ),
            tenant_set_key: concat!("UPDATE pay_tenants SET api_key_hash = ", $p1, " WHERE tenant_id = ", $p2),
            tenant_select_by_key: concat!("SELECT tenant_id FROM pay_tenants WHERE api_key_hash = ", $p1),
            payment_select_by_order: concat!(
                "SELECT ", payment_columns!(), " FROM pay_payments WHERE tenant_id = ", $p1, " AND order_id = ", $p2,
                " ORDER BY created_at, payment_no LIMIT 100"
            ),
            payment_select_paid_for_order: concat!(
                "SELECT ", payment_columns!(), " FROM pay_payments WHERE tenant_id = ", $p1, " AND order_id = ", $p2, " AND status = 'PAID'"
            ),
            payment_set_pay_url: concat!(
                "UPDATE pay_payments SET pay_url = ", $p1, ", updated_at = ", $p2, " WHERE payment_no = ", $p3, " AND status = 'PENDING'"
            ),
            payment_compare_and_set: concat!(
                "UPDATE pay_payments SET status = ", $p1, ", updated_at = ", $p2, " WHERE payment_no = ", $p3, " AND status = ", $p4
            ),
            wallet_select: concat!("SELECT balance FROM pay_wallets WHERE tenant_id = ", $p1, " AND user_id = ", $p2),
            payment_select_pending_before: concat!(
                "SELECT ", payment_columns!(), " FROM pay_payments WHERE status = 'PENDING' AND created_at < ", $p1,
                " AND (created_at > ", $p2, " OR (created_at = ", $p3, " AND payment_no > ", $p4, "))",
                " ORDER BY created_at, payment_no LIMIT ", $p5
            ),
            payment_select_pending_before_for_tenant: concat!(
                "SELECT ", payment_columns!(), " FROM pay_payments WHERE tenant_id = ", $p1, " AND status = 'PENDING' AND created_at < ", $p2,
                " AND (created_at > ", $p3, " OR (created_at = ", $p4, " AND payment_no > ", $p5, "))",
                " ORDER BY created_at, payment_no LIMIT ", $p6
            ),
            entries_select: concat!(
                "SELECT entry_no, kind, amount, reference, order_id, balance_after, created_at FROM pay_wallet_entries WHERE tenant_id = ", $p1,
                " AND user_id = ", $p2, " ORDER BY created_at DESC, entry_no DESC LIMIT 100"
            ),
        }
    };
}

static POSTGRES: PayStatements = statements!(
    insert_ignore: "INSERT INTO", on_conflict: " ON CONFLICT DO NOTHING", locked: " FOR UPDATE",
    p: ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12"]
);
static SQLITE: PayStatements = statements!(
    insert_ignore: "INSERT INTO", on_conflict: " ON CONFLICT DO NOTHING", locked: "",
    p: ["$1", "$2", "$3", "$4", "$5", "$6", "$7", "$8", "$9", "$10", "$11", "$12"]
);
// INSERT IGNORE turns any duplicate (primary key or the generated-flag unique keys) into
// "0 rows"; the values are validated before, so it cannot hide a truncation.
static MYSQL: PayStatements = statements!(
    insert_ignore: "INSERT IGNORE INTO", on_conflict: "", locked: " FOR UPDATE",
    p: ["?", "?", "?", "?", "?", "?", "?", "?", "?", "?", "?", "?"]
);

impl PayDialect for PostgresDialect {
    fn pay_statements() -> &'static PayStatements {
        &POSTGRES
    }
}

impl PayDialect for SqliteDialect {
    fn pay_statements() -> &'static PayStatements {
        &SQLITE
    }
}

impl PayDialect for MySqlDialect {
    fn pay_statements() -> &'static PayStatements {
        &MYSQL
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_statement_uses_each_placeholder_once_in_order() {
        for statements in [&POSTGRES, &SQLITE] {
            for sql in [
                statements.order_insert,
                statements.payment_insert,
                statements.order_compare_and_set,
                statements.payment_mark_paid,
            ] {
                let mut expected = 1;
                let mut rest = sql;
                while let Some(position) = rest.find('$') {
                    let digits: String = rest[position + 1..]
                        .chars()
                        .take_while(char::is_ascii_digit)
                        .collect();
                    assert_eq!(digits.parse::<usize>().ok(), Some(expected), "{sql}");
                    expected += 1;
                    rest = &rest[position + 1 + digits.len()..];
                }
            }
        }
        assert_eq!(MYSQL.order_insert.matches('?').count(), 10);
        assert_eq!(POSTGRES.order_insert.matches('$').count(), 10);
    }
}
