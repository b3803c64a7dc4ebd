//! The service's storage under races, on every SQL dialect: many concurrent creations for one
//! order make one pending payment; many concurrent success notifies make one PAID transition and
//! move the order once; a wrong amount or a closed payment changes nothing.

mod support;

use mideng::clock::now_ms;
use mideng::store::sql::{Dialect, SqlStore};
use mideng_channel::ChannelKind;
use mideng_pay::domain::money::{Amount, Currency};
use mideng_pay::domain::order::{Order, OrderStatus};
use mideng_pay::domain::payment::{Payment, PaymentStatus};
use mideng_pay::store::NewPayment;
use mideng_pay::store::rows::orders::{OrderInsert, find_order, insert_order, transition_order};
use mideng_pay::store::rows::payments::{PaymentInsert, find_payment, insert_pending_payment};
use mideng_pay::store::transactions::payments::{SuccessOutcome, apply_success};

use support::unique;

const TASKS: usize = 16;

fn order(tenant: &str, order_id: &str) -> Order {
    Order {
        tenant_id: tenant.to_owned(),
        order_id: order_id.to_owned(),
        user_id: "u1".to_owned(),
        amount_fen: 46000,
        currency: "CNY".to_owned(),
        status: OrderStatus::Created,
        entitlement_sku: Some("vip-30d".to_owned()),
        entitlement_quantity: Some(1),
        fingerprint: "f".repeat(64),
        version: 0,
        client_secret: None,
        client_secret_expires_at_ms: None,
    }
}

fn payment(tenant: &str, order_id: &str) -> Payment {
    Payment {
        payment_no: unique("P"),
        tenant_id: tenant.to_owned(),
        order_id: order_id.to_owned(),
        channel: ChannelKind::Alipay,
        amount: Amount::new(46000).expect("an amount"),
        currency: Currency::Cny,
        status: PaymentStatus::Pending,
        pay_url: Some("https://qr.example/abc".to_owned()),
        expires_at_ms: now_ms() + 30 * 60 * 1000,
        channel_trade_no: None,
        paid_at_ms: None,
        created_at_ms: now_ms(),
    }
}

async fn concurrent_creations_make_one_pending_payment<D: Dialect>(store: SqlStore<D>) {
    let tenant = unique("t");
    let placed = order(&tenant, "o1");
    let created = store
        .write(|connection| Box::pin(insert_order::<D>(connection, &placed, now_ms())))
        .await
        .expect("order");
    assert_eq!(created, OrderInsert::Created);
    let again = store
        .write(|connection| Box::pin(insert_order::<D>(connection, &placed, now_ms())))
        .await
        .expect("order");
    assert!(
        matches!(again, OrderInsert::Existing(ref existing) if existing.fingerprint == "f".repeat(64))
    );

    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (store, attempt) = (store.clone(), payment(&tenant, "o1"));
            tokio::spawn(async move {
                let outcome = store
                    .write(|connection| {
                        Box::pin(insert_pending_payment::<D>(connection, &attempt, now_ms()))
                    })
                    .await;
                (attempt.payment_no, outcome)
            })
        })
        .collect();
    let mut winners = Vec::new();
    let mut returned = Vec::new();
    for task in tasks {
        let (payment_no, outcome) = task.await.expect("task");
        match outcome.expect("never an error, duplicates included") {
            PaymentInsert::Created => winners.push(payment_no),
            PaymentInsert::ExistingPending(existing) => returned.push(existing.payment_no),
        }
    }
    assert_eq!(
        winners.len(),
        1,
        "exactly one pending payment for {TASKS} concurrent creations"
    );
    assert!(
        returned.iter().all(|number| *number == winners[0]),
        "every loser gets the winner's payment"
    );
}

async fn concurrent_success_notifies_pay_once<D: Dialect>(store: SqlStore<D>) {
    let tenant = unique("t");
    let placed = order(&tenant, "o1");
    let attempt = payment(&tenant, "o1");
    // The channel's trade number is unique for good (a unique index): one per run.
    let trade_no: &'static str = Box::leak(unique("T").into_boxed_str());
    store
        .write(|connection| Box::pin(insert_order::<D>(connection, &placed, now_ms())))
        .await
        .expect("order");
    store
        .write(|connection| Box::pin(insert_pending_payment::<D>(connection, &attempt, now_ms())))
        .await
        .expect("payment");

    let tasks: Vec<_> = (0..TASKS)
        .map(|_| {
            let (store, payment_no) = (store.clone(), attempt.payment_no.clone());
            tokio::spawn(async move {
                store
                    .write(|connection| {
                        Box::pin(apply_success::<D>(
                            connection,
                            &payment_no,
                            trade_no,
                            46000,
                            now_ms(),
                            now_ms(),
                        ))
                    })
                    .await
            })
        })
        .collect();
    let mut paid = 0;
    for task in tasks {
        match task.await.expect("task").expect("no errors") {
            SuccessOutcome::Paid { order_moved, .. } => {
                assert!(order_moved);
                paid += 1;
            }
            SuccessOutcome::AlreadyPaid => {}
            other => panic!("unexpected {other:?}"),
        }
    }
    assert_eq!(
        paid, 1,
        "one PAID transition for {TASKS} concurrent notifies"
    );
    let stored = store
        .write(|connection| Box::pin(find_payment::<D>(connection, &attempt.payment_no, false)))
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(stored.status, PaymentStatus::Paid);
    assert_eq!(stored.channel_trade_no.as_deref(), Some(trade_no));
    let order = store
        .write(|connection| Box::pin(find_order::<D>(connection, &tenant, "o1", false)))
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(
        (order.status, order.version),
        (OrderStatus::Paid, 1),
        "the order moved once, with its payment"
    );
}

async fn wrong_amounts_closed_payments_and_unknown_numbers_change_nothing<D: Dialect>(
    store: SqlStore<D>,
) {
    // The channel's trade number is unique for good (a unique index): one per run.
    let trade_no: &'static str = Box::leak(unique("T").into_boxed_str());
    let tenant = unique("t");
    let placed = order(&tenant, "o1");
    let attempt = payment(&tenant, "o1");
    store
        .write(|connection| Box::pin(insert_order::<D>(connection, &placed, now_ms())))
        .await
        .expect("order");
    store
        .write(|connection| Box::pin(insert_pending_payment::<D>(connection, &attempt, now_ms())))
        .await
        .expect("payment");

    let cheap = store
        .write(|connection| {
            Box::pin(apply_success::<D>(
                connection,
                &attempt.payment_no,
                trade_no,
                1,
                now_ms(),
                now_ms(),
            ))
        })
        .await
        .expect("apply");
    assert_eq!(cheap, SuccessOutcome::AmountMismatch);
    let unknown = store
        .write(|connection| {
            Box::pin(apply_success::<D>(
                connection,
                "P-none",
                trade_no,
                46000,
                now_ms(),
                now_ms(),
            ))
        })
        .await
        .expect("apply");
    assert_eq!(unknown, SuccessOutcome::UnknownPayment);
    let stored = store
        .write(|connection| Box::pin(find_payment::<D>(connection, &attempt.payment_no, false)))
        .await
        .expect("find")
        .expect("exists");
    assert_eq!(stored.status, PaymentStatus::Pending, "nothing changed");

    // A canceled order's payment: the payment records the charge, the order stays canceled.
    let moved = store
        .write(|connection| {
            Box::pin(transition_order::<D>(
                connection,
                &tenant,
                "o1",
                OrderStatus::Created,
                OrderStatus::Canceled,
                now_ms(),
            ))
        })
        .await
        .expect("cancel");
    assert!(moved);
    let late = store
        .write(|connection| {
            Box::pin(apply_success::<D>(
                connection,
                &attempt.payment_no,
                trade_no,
                46000,
                now_ms(),
                now_ms(),
            ))
        })
        .await
        .expect("apply");
    assert_eq!(
        late,
        SuccessOutcome::Paid {
            order_moved: false,
            open_sibling: None
        },
        "the charge is recorded; the order needs a refund"
    );
}

/// The service's clock, set by hand.
struct SetClock(std::sync::atomic::AtomicI64);

impl mideng_pay::flows::Clock for SetClock {
    fn now_ms(&self) -> i64 {
        self.0.load(std::sync::atomic::Ordering::SeqCst)
    }
}

/// The storage ports read the time from the service's one clock, not the machine's: a payment
/// opened when the clock says 2030 was created in 2030, and one opened after the clock moved
/// on bears the moved time (what a test of expiries or a skewed instance of the storm relies on).
async fn the_ports_read_the_time_from_the_services_clock<D: Dialect>(store: SqlStore<D>) {
    use std::sync::Arc;
    use std::sync::atomic::Ordering;
    const AT_MS: i64 = 1_893_456_000_000; // 2030-01-01T00:00:00Z
    let clock = Arc::new(SetClock(AT_MS.into()));
    let ports = mideng_pay::store::Store::sql(store, clock.clone());
    let tenant = unique("t");
    ports
        .tenants
        .upsert_tenant(&tenant, &"a".repeat(64), None)
        .await
        .expect("tenant");
    for (order_id, at_ms) in [("o1", AT_MS), ("o2", AT_MS + 90_000)] {
        clock.0.store(at_ms, Ordering::SeqCst);
        ports
            .orders
            .create_order(&order(&tenant, order_id))
            .await
            .expect("order");
        let attempt = NewPayment {
            payment_no: unique("P"),
            tenant_id: tenant.clone(),
            order_id: order_id.to_owned(),
            channel: ChannelKind::Alipay,
            expires_at_ms: at_ms + 30 * 60 * 1000,
        };
        ports
            .payments
            .open_payment(&attempt, None)
            .await
            .expect("open");
        let (_, payments) = ports
            .orders
            .order(&tenant, order_id)
            .await
            .expect("read")
            .expect("the order");
        let opened = payments
            .iter()
            .find(|found| found.payment_no == attempt.payment_no)
            .expect("the payment");
        assert_eq!(opened.created_at_ms, at_ms, "{order_id}");
    }
}

dialect_suite!(
    the_ports_read_the_time_from_the_services_clock,
    concurrent_creations_make_one_pending_payment,
    concurrent_success_notifies_pay_once,
    wrong_amounts_closed_payments_and_unknown_numbers_change_nothing,
);
