//! The audit's only I/O: one read of the tables it needs.

use mideng::StoreError;
use mideng::store::sql::{Dialect, SqlConn, SqlRow, SqlStore, store_error};

use super::facts::*;

/// Reads the tables the audit needs (the whole database: the storm's deployment has its own).
pub async fn snapshot<D: Dialect>(store: &SqlStore<D>) -> Result<Snapshot, StoreError> {
    let mut connection = store.pool().acquire().await.map_err(store_error::<D>)?;
    let read = |error: mideng::sqlx::Error| store_error::<D>(error);
    let mut snapshot = Snapshot::default();
    for row in connection
        .rows(
            "SELECT payment_no, tenant_id, order_id, status, amount, expires_at, updated_at, \
             refunded, currency FROM pay_payments",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.payments.push(PaymentFact {
            payment_no: row.text(0).map_err(read)?,
            tenant_id: row.text(1).map_err(read)?,
            order_id: row.text(2).map_err(read)?,
            status: row.text(3).map_err(read)?,
            amount: row.int(4).map_err(read)?,
            expires_at_ms: row.int(5).map_err(read)?,
            updated_at_ms: row.int(6).map_err(read)?,
            refunded: row.int(7).map_err(read)?,
            currency: row.text(8).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT tenant_id, order_id, status, entitlement_sku, entitlement_quantity, \
             user_id, amount, currency FROM pay_orders",
            &[],
        )
        .await
        .map_err(read)?
    {
        let sku = row.opt_text(3).map_err(read)?;
        let quantity = row.opt_int(4).map_err(read)?;
        snapshot.orders.push(OrderFact {
            tenant_id: row.text(0).map_err(read)?,
            order_id: row.text(1).map_err(read)?,
            status: row.text(2).map_err(read)?,
            has_entitlement: sku.is_some(),
            currency: row.text(7).map_err(read)?,
            pricing: Pricing {
                user_id: row.text(5).map_err(read)?,
                amount: row.int(6).map_err(read)?,
                // The schema keeps both or neither; a quantity missing reads as 0 (no order
                // is priced so).
                entitlement: sku.map(|sku| (sku, quantity.unwrap_or(0))),
            },
        });
    }
    for row in connection
        .rows(
            "SELECT payment_no, tenant_id, order_id, user_id, sku, quantity, revoked_at \
             FROM pay_grants",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.grants.push(GrantFact {
            payment_no: row.text(0).map_err(read)?,
            tenant_id: row.text(1).map_err(read)?,
            order_id: row.text(2).map_err(read)?,
            user_id: row.text(3).map_err(read)?,
            sku: row.text(4).map_err(read)?,
            quantity: row.int(5).map_err(read)?,
            revoked_at_ms: row.opt_int(6).map_err(read)?,
        });
    }
    for row in connection
        .rows("SELECT tenant_id, user_id, balance FROM pay_wallets", &[])
        .await
        .map_err(read)?
    {
        snapshot.wallets.push(WalletFact {
            tenant_id: row.text(0).map_err(read)?,
            user_id: row.text(1).map_err(read)?,
            balance: row.int(2).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT tenant_id, user_id, kind, amount, order_id, reference, entry_no, \
             balance_after, wallet_version FROM pay_wallet_entries",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.entries.push(EntryFact {
            tenant_id: row.text(0).map_err(read)?,
            user_id: row.text(1).map_err(read)?,
            kind: row.text(2).map_err(read)?,
            amount: row.int(3).map_err(read)?,
            order_id: row.opt_text(4).map_err(read)?,
            reference: row.text(5).map_err(read)?,
            entry_no: row.text(6).map_err(read)?,
            balance_after: row.int(7).map_err(read)?,
            wallet_version: row.int(8).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT refund_no, tenant_id, request_key, payment_no, order_id, amount, status \
             FROM pay_refunds",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.refunds.push(RefundFact {
            refund_no: row.text(0).map_err(read)?,
            tenant_id: row.text(1).map_err(read)?,
            request_key: row.text(2).map_err(read)?,
            payment_no: row.text(3).map_err(read)?,
            order_id: row.text(4).map_err(read)?,
            amount: row.int(5).map_err(read)?,
            status: row.text(6).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT d.tenant_id, d.event_id, d.status, e.url FROM pay_webhook_deliveries d \
             JOIN pay_webhook_endpoints e ON e.endpoint_id = d.endpoint_id",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.deliveries.push(DeliveryFact {
            tenant_id: row.text(0).map_err(read)?,
            event_id: row.text(1).map_err(read)?,
            status: row.text(2).map_err(read)?,
            url: row.text(3).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT id, topic, message_key FROM mideng_outbox WHERE topic IN \
             ('payment.succeeded', 'payment.closed', 'refund.succeeded')",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.events.push(EventFact {
            id: row.text(0).map_err(read)?,
            topic: row.text(1).map_err(read)?,
            key: row.text(2).map_err(read)?,
        });
    }
    // The event log, not the outbox: it keeps every event for the webhook retention (the
    // outbox's sent rows may be purged sooner), with its tenant and its payload, and it holds
    // only what the service logged with a change.
    let mut logged = Vec::new();
    for row in connection
        .rows(
            "SELECT event_id, tenant_id, event_type, data FROM pay_event_log WHERE event_type IN \
             ('payment.succeeded', 'payment.closed', 'refund.succeeded')",
            &[],
        )
        .await
        .map_err(read)?
    {
        logged.push(LoggedEventFact {
            event_id: row.text(0).map_err(read)?,
            tenant_id: row.text(1).map_err(read)?,
            event_type: row.text(2).map_err(read)?,
            data: row.text(3).map_err(read)?,
        });
    }
    snapshot.logged = Some(logged);
    for row in connection
        .rows(
            "SELECT payment_no, tenant_id, order_id, kind, amount, status, refund_no \
             FROM pay_refund_cases",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.cases.push(CaseFact {
            payment_no: row.text(0).map_err(read)?,
            tenant_id: row.text(1).map_err(read)?,
            order_id: row.text(2).map_err(read)?,
            kind: row.text(3).map_err(read)?,
            amount: row.int(4).map_err(read)?,
            status: row.text(5).map_err(read)?,
            refund_no: row.opt_text(6).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT message_id, consumer, status, attempts FROM pay_event_failures",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.failures.push(FailureFact {
            message_id: row.text(0).map_err(read)?,
            consumer: row.text(1).map_err(read)?,
            status: row.text(2).map_err(read)?,
            attempts: row.int(3).map_err(read)?,
        });
    }
    for row in connection
        .rows(
            "SELECT id FROM mideng_outbox WHERE parked_at IS NOT NULL AND sent_at IS NULL",
            &[],
        )
        .await
        .map_err(read)?
    {
        snapshot.parked_outbox.push(row.text(0).map_err(read)?);
    }
    Ok(snapshot)
}
