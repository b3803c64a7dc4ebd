//! Refunds against the simulator: full and partial, replays, the database's refusal of
//! over-refunding under concurrency, lost channel answers settled by reconciliation, and
//! WeChat's asynchronous refunds settled by their notify.

use std::sync::Arc;
use std::time::{Duration, Instant};

use mideng_pay::workers::reconcile::{ReconcileSettings, reconcile_once};
use serde_json::{Value, json};

use crate::harness::{Answer, Backend, Service, race, unique};

/// A paid payment of `amount` fen on `channel`: its order id and number.
async fn paid(service: &Service, channel: &str, amount: i64) -> (String, String) {
    service.paid_payment("u-r", channel, amount).await
}

async fn refund(service: &Service, payment_no: &str, amount: i64, key: &str) -> Answer {
    service
        .post(
            &format!("/v1/payments/{payment_no}/refunds"),
            json!({"amount": amount, "reason": "退货"}),
            &[("Idempotency-Key", key)],
        )
        .await
}

/// Waits until the refund is no longer PROCESSING (the channel's notify, or reconciliation
/// when `reconcile` is set); its view.
async fn settled(service: &Service, refund_no: &str, reconcile: bool) -> Value {
    let started = Instant::now();
    loop {
        let view = service.get(&format!("/v1/refunds/{refund_no}")).await;
        assert_eq!(view.status, 200, "{}", view.json());
        if view.json()["status"] != "PROCESSING" {
            return view.json();
        }
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "refund never settled: {}",
            view.json()
        );
        if reconcile {
            let settings = ReconcileSettings {
                min_age: Duration::ZERO,
                tenant: Some(service.tenant.clone()),
                ..ReconcileSettings::default()
            };
            reconcile_once(&service.state.ports, &settings)
                .await
                .expect("round");
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// What the channel paid back to the buyer for the trade.
async fn ledger_refunded(service: &Service, payment_no: &str) -> i64 {
    let trade = service.sim_trade(payment_no).await;
    trade["refunded_fen"]
        .as_i64()
        .unwrap_or_else(|| panic!("{trade}"))
}

/// Partial then full refunds on both channels: a replay answers the first refund, a key
/// reused for another amount is refused, more than is left is refused with what is left, and
/// the last refund moves the order to REFUNDED with one `refund.succeeded` per refund.
pub(crate) async fn partial_and_full_refunds_move_money_once(backend: Backend) {
    let service = Service::start(backend).await;
    for channel in ["alipay", "wechat"] {
        let (order_id, number) = paid(&service, channel, 10_000).await;
        let key = unique("rk");
        let first = refund(&service, &number, 3_000, &key).await;
        assert_eq!(first.status, 201, "{}", first.json());
        let refund_no = first.json()["refund_no"]
            .as_str()
            .expect("number")
            .to_owned();
        let again = refund(&service, &number, 3_000, &key).await;
        assert_eq!(again.status, 201, "{}", again.json());
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.json()["refund_no"], first.json()["refund_no"]);
        let reused = refund(&service, &number, 2_000, &key).await;
        assert_eq!(reused.status, 422, "{}", reused.json());
        assert_eq!(
            settled(&service, &refund_no, false).await["status"],
            "SUCCESS"
        );

        let over = refund(&service, &number, 7_001, &unique("rk")).await;
        assert_eq!(
            (over.status, over.code().as_str()),
            (409, "refund-exceeds-payment"),
            "{}",
            over.json()
        );
        assert!(
            over.json()["detail"]
                .as_str()
                .is_some_and(|detail| detail.contains("7000")),
            "{}",
            over.json()
        );
        let rest = refund(&service, &number, 7_000, &unique("rk")).await;
        assert_eq!(rest.status, 201, "{}", rest.json());
        let rest_no = rest.json()["refund_no"]
            .as_str()
            .expect("number")
            .to_owned();
        assert_eq!(
            settled(&service, &rest_no, false).await["status"],
            "SUCCESS"
        );

        let view = service.get(&format!("/v1/payments/{number}")).await.json();
        assert_eq!(view["refundable"], 0, "{view}");
        assert_eq!(view["refunds"].as_array().map(Vec::len), Some(2), "{view}");
        assert_eq!(service.order(&order_id).await["status"], "REFUNDED");
        // Refunded in full: the order's entitlement is revoked, once.
        let started = Instant::now();
        loop {
            let grants = service.get("/v1/entitlements?user_id=u-r").await.json();
            let grant = grants["grants"]
                .as_array()
                .and_then(|grants| {
                    grants
                        .iter()
                        .find(|grant| grant["order_id"] == order_id.as_str())
                })
                .cloned();
            if grant
                .as_ref()
                .is_some_and(|grant| grant["revoked_at"].is_string())
            {
                break;
            }
            assert!(
                started.elapsed() < Duration::from_secs(30),
                "the grant is never revoked: {grants}"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            ledger_refunded(&service, &number).await,
            10_000,
            "{channel}"
        );
        let nothing_left = refund(&service, &number, 1, &unique("rk")).await;
        assert_eq!(nothing_left.status, 409, "{}", nothing_left.json());
    }

    // A payment that is not paid has nothing to refund; another tenant's is not found.
    let order_id = unique("o");
    service.create_order(&order_id, "u-r", 500).await;
    let pending = service.create_payment(&order_id, "wechat").await;
    let pending_no = pending.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned();
    let refused = refund(&service, &pending_no, 100, &unique("rk")).await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (409, "payment-not-refundable")
    );
    let missing = refund(&service, "P-no-such-payment", 100, &unique("rk")).await;
    assert_eq!(missing.status, 404);
    let keyless = service
        .post(
            &format!("/v1/payments/{pending_no}/refunds"),
            json!({"amount": 100}),
            &[],
        )
        .await;
    assert_eq!(keyless.status, 400, "{}", keyless.json());
}

/// Fifty partial refunds under distinct keys at once, together worth more than the payment:
/// exactly the ones that fit are made, and the channel refunds exactly their sum.
pub(crate) async fn concurrent_refunds_never_exceed_the_payment(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let (_, number) = paid(&service, "alipay", 10_000).await;
    let answers = race(50, |_| {
        let (service, number) = (service.clone(), number.clone());
        async move { refund(&service, &number, 300, &unique("rk")).await }
    })
    .await;
    let made = answers.iter().filter(|answer| answer.status == 201).count();
    let refused = answers
        .iter()
        .filter(|answer| answer.status == 409 && answer.code() == "refund-exceeds-payment")
        .count();
    assert_eq!((made, refused), (33, 17), "{answers:?}");
    let view = service.get(&format!("/v1/payments/{number}")).await.json();
    assert_eq!(view["refundable"], 100, "{view}");
    assert_eq!(ledger_refunded(&service, &number).await, 9_900);
}

/// The channel applied a refund but its answer was lost: the refund stays PROCESSING, and
/// reconciliation settles it from the channel's record, asking again under the same number
/// when the channel never got it; the channel refunds once.
pub(crate) async fn a_lost_refund_answer_is_settled_once(backend: Backend) {
    let service = Service::start(backend).await;
    for (channel, method, applied) in [
        ("wechat", "wechat.refund", true),
        ("alipay", "alipay.trade.refund", true),
        ("alipay", "alipay.trade.refund", false),
    ] {
        let (_, number) = paid(&service, channel, 2_000).await;
        service
            .sim_post(
                "/sim/fail-next",
                json!({"method": method, "apply_anyway": applied}),
            )
            .await;
        let lost = refund(&service, &number, 2_000, &unique("rk")).await;
        assert_eq!(lost.status, 201, "{}", lost.json());
        assert_eq!(lost.json()["status"], "PROCESSING", "{}", lost.json());
        let refund_no = lost.json()["refund_no"]
            .as_str()
            .expect("number")
            .to_owned();
        assert_eq!(
            settled(&service, &refund_no, true).await["status"],
            "SUCCESS",
            "{channel} applied={applied}"
        );
        assert_eq!(ledger_refunded(&service, &number).await, 2_000);
    }
}

/// A payment paid after its order was canceled is a refund case: two reconcilers at once
/// refund it once, under its own request key; with automatic refunds off it is only recorded,
/// and a merchant's refund of it is refused.
pub(crate) async fn a_payment_after_cancel_is_refunded_once(backend: Backend) {
    let service = Service::start(backend).await;
    let paid_after_cancel = |channel: &'static str| {
        let service = &service;
        async move {
            let order_id = unique("o");
            service.create_order(&order_id, "u-c", 3_300).await;
            let created = service.create_payment(&order_id, channel).await;
            let number = created.json()["payment_no"]
                .as_str()
                .expect("number")
                .to_owned();
            let canceled = service
                .post(
                    &format!("/v1/orders/{order_id}/transitions"),
                    json!({"to": "CANCELED"}),
                    &[],
                )
                .await;
            assert_eq!(canceled.status, 200, "{}", canceled.json());
            assert_eq!(service.pay_at_channel(&number).await["outcome"], "paid");
            service.settled_trade(&number).await;
            let order = service.order(&order_id).await;
            assert_eq!(order["status"], "CANCELED", "{order}");
            assert_eq!(order["payments"][0]["status"], "PAID", "{order}");
            number
        }
    };
    let settings = ReconcileSettings {
        min_age: Duration::ZERO,
        tenant: Some(service.tenant.clone()),
        ..ReconcileSettings::default()
    };

    // Off: recorded, not refunded.
    let mut off = service.state.ports.clone();
    off.settings.automatic_refunds = false;
    let kept = paid_after_cancel("alipay").await;
    let round = reconcile_once(&off, &settings).await.expect("round");
    assert_eq!(round.cases_refunded, 0);
    assert_eq!(ledger_refunded(&service, &kept).await, 0);
    // Its charge goes back through the case, in full: a merchant's partial refund is refused
    // (one before the case's would leave the case unable to give the whole charge back).
    let partial = refund(&service, &kept, 1_000, &unique("rk")).await;
    assert_eq!(
        (partial.status, partial.code().as_str()),
        (409, "payment-not-refundable"),
        "{}",
        partial.json()
    );
    assert_eq!(ledger_refunded(&service, &kept).await, 0);
    // Money owed back is listed for the tenant, never only a log line.
    let owed = service.get("/v1/refund-cases").await;
    assert_eq!(owed.status, 200, "{}", owed.json());
    let listed: Vec<Value> = owed.json()["data"].as_array().cloned().unwrap_or_default();
    let case = listed
        .iter()
        .find(|case| case["payment_no"] == kept.as_str())
        .unwrap_or_else(|| panic!("the unrefunded case is listed: {listed:?}"));
    assert_eq!(
        (&case["kind"], &case["amount"], &case["status"]),
        (&json!("PAID_AFTER_CANCEL"), &json!(3_300), &json!("OPEN")),
        "{case}"
    );
    assert!(
        Service::beside(&service, false)
            .await
            .get("/v1/refund-cases")
            .await
            .json()["data"]
            .as_array()
            .is_some_and(|cases| cases.iter().all(|case| case["payment_no"] != kept.as_str())),
        "another tenant does not see it"
    );

    // On: two rounds at once, one refund each.
    let wechat = paid_after_cancel("wechat").await;
    let ports = service.state.ports.clone();
    let (first, second) = tokio::join!(
        reconcile_once(&ports, &settings),
        reconcile_once(&ports, &settings)
    );
    let (first, second) = (first.expect("round"), second.expect("round"));
    assert!(
        first.cases_refunded + second.cases_refunded >= 2,
        "{first:?} {second:?}"
    );
    for number in [&kept, &wechat] {
        let started = Instant::now();
        loop {
            let view = service.get(&format!("/v1/payments/{number}")).await.json();
            let refunds = view["refunds"].as_array().cloned().unwrap_or_default();
            assert_eq!(refunds.len(), 1, "one automatic refund: {view}");
            if refunds[0]["status"] == "SUCCESS" {
                assert_eq!(refunds[0]["amount"], 3_300);
                break;
            }
            assert!(started.elapsed() < Duration::from_secs(30), "{view}");
            reconcile_once(&ports, &settings).await.expect("round");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        assert_eq!(
            ledger_refunded(&service, number).await,
            3_300,
            "refunded once"
        );
    }
    // Later rounds find nothing more to do, and nothing is owed any more.
    let round = reconcile_once(&ports, &settings).await.expect("round");
    assert_eq!(round.cases_refunded, 0, "{round:?}");
    let owed = service.get("/v1/refund-cases").await.json();
    assert!(
        owed["data"]
            .as_array()
            .is_some_and(|cases| cases
                .iter()
                .all(|case| case["payment_no"] != kept.as_str()
                    && case["payment_no"] != wechat.as_str())),
        "refunded cases are settled: {owed}"
    );

    // A case's refund that the channel closes (nothing moved) opens the case again: the next
    // round asks once more under the case's next key, and the money goes back once.
    let closed_first = paid_after_cancel("wechat").await;
    service
        .sim_post("/sim/refund-outcome", json!({"outcome": "closed"}))
        .await;
    let started = Instant::now();
    let view = loop {
        reconcile_once(&ports, &settings).await.expect("round");
        let view = service
            .get(&format!("/v1/payments/{closed_first}"))
            .await
            .json();
        let refunds = view["refunds"].as_array().cloned().unwrap_or_default();
        if refunds.iter().any(|refund| refund["status"] == "SUCCESS") {
            break view;
        }
        assert!(started.elapsed() < Duration::from_secs(60), "{view}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    let statuses: Vec<&str> = view["refunds"]
        .as_array()
        .into_iter()
        .flatten()
        .filter_map(|refund| refund["status"].as_str())
        .collect();
    assert_eq!(statuses.len(), 2, "one closed, one given back: {view}");
    assert!(
        statuses.contains(&"CLOSED") && statuses.contains(&"SUCCESS"),
        "{view}"
    );
    assert_eq!(
        ledger_refunded(&service, &closed_first).await,
        3_300,
        "given back once"
    );
    let round = reconcile_once(&ports, &settings).await.expect("round");
    assert_eq!(round.cases_refunded, 0, "{round:?}");
}
