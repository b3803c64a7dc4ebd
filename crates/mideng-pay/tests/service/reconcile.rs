//! Reconciliation: lost notifies and expired payments, found by asking the channel.

use std::sync::Arc;
use std::time::Duration;

use mideng_pay::flows::{PaymentSettings, Ports};
use mideng_pay::workers::reconcile::{ReconcileSettings, reconcile_once};
use serde_json::json;

use crate::harness::{Backend, Service, Shifted, unique};

/// At once, and only this test's tenant (the servers' databases are shared by the tests).
fn now(service: &Service) -> ReconcileSettings {
    ReconcileSettings {
        min_age: Duration::ZERO,
        tenant: Some(service.tenant.clone()),
        ..ReconcileSettings::default()
    }
}

/// The service's ports with no clock grace past a trade's expiry: expired means expired.
fn at_once(service: &Service) -> Ports {
    let mut ports = service.state.ports.clone();
    ports.settings.expiry_grace = Duration::ZERO;
    ports
}

pub(crate) async fn lost_notifies_are_found_by_reconciliation(backend: Backend) {
    let service = Service::start(backend).await;
    let mut orders = Vec::new();
    for channel in ["alipay", "wechat", "alipay", "wechat"] {
        let order_id = unique("o");
        service.create_order(&order_id, "u-7", 888).await;
        let created = service.create_payment(&order_id, channel).await;
        let number = created.json()["payment_no"]
            .as_str()
            .expect("number")
            .to_owned();
        service
            .sim_put(
                "/sim/notify-policy",
                json!({"mode": "drop", "out_trade_no": number}),
            )
            .await;
        assert_eq!(service.pay_at_channel(&number).await["outcome"], "paid");
        let trade = service.settled_trade(&number).await;
        assert_eq!(trade["notifies"][0]["state"], "dropped", "{trade}");
        assert_eq!(
            service.order(&order_id).await["status"],
            "CREATED",
            "nobody told us"
        );
        orders.push(order_id);
    }
    // Two reconcilers at once (two instances' workers): each payment is settled once.
    let settings = now(&service);
    let ports = at_once(&service);
    let (first, second) = tokio::join!(
        reconcile_once(&ports, &settings),
        reconcile_once(&ports, &settings)
    );
    let (first, second) = (first.expect("round"), second.expect("round"));
    assert_eq!(first.paid + second.paid, 4, "{first:?} {second:?}");
    for order_id in &orders {
        let order = service.order(order_id).await;
        assert_eq!(order["status"], "PAID");
        assert_eq!(order["version"], 1, "one transition");
        assert_eq!(order["payments"][0]["status"], "PAID");
    }
    let again = reconcile_once(&at_once(&service), &settings)
        .await
        .expect("round");
    assert_eq!(again.examined, 0, "nothing pending is left: {again:?}");
    // The success flow wrote its event: every found payment grants its entitlement, once.
    let grants = service.settled_grants("u-7", 4).await;
    for order_id in &orders {
        assert_eq!(
            grants
                .iter()
                .filter(|grant| grant["order_id"] == order_id.as_str())
                .count(),
            1,
            "{grants:#?}"
        );
    }
}

pub(crate) async fn expired_payments_are_closed_and_orders_canceled(backend: Backend) {
    let service = Service::start(backend).await;
    let expire_after = PaymentSettings::default().expire_after;
    let mut attempts = Vec::new();
    for channel in ["alipay", "wechat"] {
        let order_id = unique("o");
        service.create_order(&order_id, "u-8", 321).await;
        let created = service.create_payment(&order_id, channel).await;
        assert_eq!(created.status, 201, "{}", created.json());
        let number = created.json()["payment_no"]
            .as_str()
            .expect("number")
            .to_owned();
        attempts.push((order_id, number));
    }
    // Not expired, by either clock: left alone, however slowly the machine got here.
    let early = reconcile_once(&at_once(&service), &now(&service))
        .await
        .expect("round");
    assert_eq!(
        (early.examined, early.left),
        (2, 2),
        "not expired: left alone: {early:?}"
    );

    // Both clocks past the expiry: the channel's, which expires the codes it issued for real,
    // and the service's, which judges a code the channel never saw scanned (Alipay's).
    let past = expire_after + Duration::from_secs(5);
    service
        .sim_post("/sim/clock/advance", json!({"seconds": past.as_secs()}))
        .await;
    let mut later = at_once(&service);
    later.clock = Arc::new(Shifted(
        i64::try_from(past.as_millis()).expect("a few minutes"),
    ));
    let late = reconcile_once(&later, &now(&service)).await.expect("round");
    assert_eq!(late.closed, 2, "{late:?}");
    for (order_id, number) in &attempts {
        let order = service.order(order_id).await;
        assert_eq!(order["status"], "CANCELED");
        assert_eq!(order["payments"][0]["status"], "CLOSED");
        let refused = service.pay_at_channel(number).await;
        assert_ne!(
            refused["outcome"], "paid",
            "the channel no longer takes it: {refused}"
        );
    }
}

/// Scenario 2 of the channels: a payment closed here (local expiry, or reconciliation) that the
/// channel charged anyway. The charge is recorded; a double charge is refused and left visible.
pub(crate) async fn a_late_success_for_a_closed_payment_is_recorded(backend: Backend) {
    let service = Service::start(backend).await;
    let number_of = |answer: &crate::harness::Answer| {
        answer.json()["payment_no"]
            .as_str()
            .expect("number")
            .to_owned()
    };

    // Closed here only; the order still waits: payment and order become PAID.
    let order_a = unique("o");
    service.create_order(&order_a, "u-9", 150).await;
    let first = number_of(&service.create_payment(&order_a, "alipay").await);
    service
        .state
        .ports
        .store
        .payments
        .close_payment(&first, None)
        .await
        .expect("closed");
    assert_eq!(service.pay_at_channel(&first).await["outcome"], "paid");
    let trade = service.settled_trade(&first).await;
    assert_eq!(trade["notifies"][0]["state"], "acknowledged", "{trade}");
    let order = service.order(&order_a).await;
    assert_eq!(
        (
            order["status"].as_str(),
            order["payments"][0]["status"].as_str()
        ),
        (Some("PAID"), Some("PAID"))
    );

    // Closed and the order canceled (expired here first): the payment is PAID, the order stays
    // CANCELED — a refund case, acknowledged to the channel, visible on the order.
    let order_b = unique("o");
    service.create_order(&order_b, "u-9", 150).await;
    let second = number_of(&service.create_payment(&order_b, "wechat").await);
    let (_, canceled) = service
        .state
        .ports
        .store
        .payments
        .expire_payment(&second, None)
        .await
        .expect("expired");
    assert!(canceled);
    assert_eq!(service.pay_at_channel(&second).await["outcome"], "paid");
    service.settled_trade(&second).await;
    let order = service.order(&order_b).await;
    assert_eq!(
        (
            order["status"].as_str(),
            order["payments"][0]["status"].as_str()
        ),
        (Some("CANCELED"), Some("PAID"))
    );

    // Charged twice: the first attempt closed here, a second one paid, then the first is paid
    // at the channel too. Never two PAID payments for one order: refused, the channel keeps
    // telling, and the order keeps its one payment.
    let order_c = unique("o");
    service.create_order(&order_c, "u-9", 150).await;
    let stale = number_of(&service.create_payment(&order_c, "alipay").await);
    service
        .state
        .ports
        .store
        .payments
        .close_payment(&stale, None)
        .await
        .expect("closed");
    let paying = number_of(&service.create_payment(&order_c, "alipay").await);
    assert_eq!(service.pay_at_channel(&paying).await["outcome"], "paid");
    service.settled_trade(&paying).await;
    assert_eq!(service.pay_at_channel(&stale).await["outcome"], "paid");
    let started = std::time::Instant::now();
    loop {
        let trade = service.sim_trade(&stale).await;
        let answered = trade["notifies"][0]["deliveries"]
            .as_array()
            .is_some_and(|deliveries| {
                deliveries
                    .iter()
                    .any(|delivery| delivery["status"].is_number())
            });
        if answered {
            // Recorded as a refund case with the notify: acknowledged.
            assert_eq!(
                trade["notifies"][0]["deliveries"][0]["acknowledged"], true,
                "{trade}"
            );
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no delivery: {trade}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let order = service.order(&order_c).await;
    assert_eq!(order["status"], "PAID");
    let statuses: Vec<&str> = order["payments"]
        .as_array()
        .expect("payments")
        .iter()
        .map(|payment| payment["status"].as_str().unwrap_or_default())
        .collect();
    assert_eq!(
        statuses.iter().filter(|status| **status == "PAID").count(),
        1,
        "{statuses:?}"
    );
    // The second charge (and b's payment, paid after its order was canceled) go back, once
    // each, however many rounds run.
    for _ in 0..2 {
        let round = reconcile_once(&at_once(&service), &now(&service))
            .await
            .expect("round");
        assert!(round.cases_refunded <= 2, "{round:?}");
    }
    let stale_view = service.get(&format!("/v1/payments/{stale}")).await.json();
    assert_eq!(stale_view["status"], "CLOSED", "{stale_view}");
    assert_eq!(
        stale_view["refunds"].as_array().map(Vec::len),
        Some(1),
        "{stale_view}"
    );
    assert_eq!(
        stale_view["refunds"][0]["status"], "SUCCESS",
        "{stale_view}"
    );
    assert_eq!(service.sim_trade(&stale).await["refunded_fen"], 150);
    assert_eq!(service.sim_trade(&paying).await["refunded_fen"], 0);
    // Grants: the order paid after a local close (a) and the order paid once (c); not the
    // refund case (b), whose order stayed canceled, and not the refused second charge.
    let grants = service.settled_grants("u-9", 2).await;
    let mut granted: Vec<&str> = grants
        .iter()
        .map(|grant| grant["order_id"].as_str().unwrap_or_default())
        .collect();
    granted.sort_unstable();
    let mut expected = vec![order_a.as_str(), order_c.as_str()];
    expected.sort_unstable();
    assert_eq!(granted, expected);
}

pub(crate) async fn unpaid_payments_never_hide_a_lost_notify(backend: Backend) {
    let service = Service::start(backend).await;
    // Three codes nobody pays (they stay pending until they expire), then one paid whose
    // notify is lost: the newest, behind more pending payments than a page holds.
    for _ in 0..3 {
        let order_id = unique("o");
        service.create_order(&order_id, "u-5", 100).await;
        assert_eq!(
            service.create_payment(&order_id, "wechat").await.status,
            201
        );
    }
    let order_id = unique("o");
    service.create_order(&order_id, "u-5", 100).await;
    let created = service.create_payment(&order_id, "alipay").await;
    let number = created.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned();
    service
        .sim_put(
            "/sim/notify-policy",
            json!({"mode": "drop", "out_trade_no": number}),
        )
        .await;
    assert_eq!(service.pay_at_channel(&number).await["outcome"], "paid");
    service.settled_trade(&number).await;
    let round = reconcile_once(
        &at_once(&service),
        &ReconcileSettings {
            batch: 2,
            ..now(&service)
        },
    )
    .await
    .expect("round");
    assert_eq!(
        (round.examined, round.paid, round.left),
        (4, 1, 3),
        "{round:?}"
    );
    assert_eq!(service.order(&order_id).await["status"], "PAID");
}
