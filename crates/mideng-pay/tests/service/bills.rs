//! The daily bill: a charge nobody told us of is found and settled by the success flow (a PAID
//! payment, or a refund case when the order was paid by another attempt), a payment PAID here
//! that the channel never charged is kept as a case, a second run records nothing twice, and
//! the tenant sees its cases and an operator resolves one with a reason.

use mideng_channel::ChannelKind;
use mideng_channel::bill::BillDate;
use mideng_pay::api::api_key_hash;
use mideng_pay::flows::PaymentSettings;
use mideng_pay::web::journal::Journal;
use mideng_pay::web::{ConsoleSettings, PageSettings};
use mideng_pay::workers::bill::{BillReport, reconcile_bill};
use serde_json::{Value, json};

use crate::harness::{Backend, Service, isolated_database, queue_events, unique};

const CONSOLE_KEY: &str = "console-key-for-the-bill-tests";

fn number(answer: &crate::harness::Answer) -> String {
    answer.json()["payment_no"]
        .as_str()
        .expect("number")
        .to_owned()
}

/// A payment whose every notify is lost, closed here only (the channel still takes it).
async fn closed_here_unheard(service: &Service, order_id: &str) -> String {
    let number = number(&service.create_payment(order_id, "alipay").await);
    service
        .sim_put(
            "/sim/notify-policy",
            json!({"mode": "drop", "out_trade_no": number}),
        )
        .await;
    service
        .state
        .ports
        .store
        .payments
        .close_payment(&number, None)
        .await
        .expect("closed here");
    number
}

async fn run(service: &Service, channel: ChannelKind) -> BillReport {
    let today = BillDate::containing(service.state.ports.clock.now_ms()).expect("today");
    let report = reconcile_bill(&service.state.ports, channel, today)
        .await
        .expect("reconciled");
    assert!(report.published, "{report:?}");
    report
}

async fn cases(service: &Service) -> Vec<Value> {
    let answer = service.get("/v1/reconciliation/cases").await;
    assert_eq!(answer.status, 200, "{}", answer.json());
    answer.json()["cases"]
        .as_array()
        .cloned()
        .unwrap_or_default()
}

fn case_of<'a>(cases: &'a [Value], reference: &str) -> &'a Value {
    cases
        .iter()
        .find(|case| case["reference"] == reference)
        .unwrap_or_else(|| panic!("no case of {reference}: {cases:#?}"))
}

pub(crate) async fn the_bill_finds_every_charge_and_keeps_every_disagreement(backend: Backend) {
    let service = Service::start_with_pages(
        backend,
        isolated_database(backend).await,
        None,
        None,
        PaymentSettings {
            // The double charge stays a case, not refunded under the test's feet.
            automatic_refunds: false,
            ..PaymentSettings::default()
        },
        queue_events(),
        |_, _, _| PageSettings {
            checkout: None,
            console: Some(ConsoleSettings {
                api_key_sha256: api_key_hash(CONSOLE_KEY),
                journal: Journal::new(0),
            }),
        },
    )
    .await;

    // A: closed here, every notify lost, then the buyer paid its code.
    let order_a = unique("o");
    service.create_order(&order_a, "u-b", 150).await;
    let lost = closed_here_unheard(&service, &order_a).await;
    assert_eq!(service.pay_at_channel(&lost).await["outcome"], "paid");
    // B: paid by a second attempt, then the first (closed here, unheard) was paid too.
    let order_b = unique("o");
    service.create_order(&order_b, "u-b", 230).await;
    let stale = closed_here_unheard(&service, &order_b).await;
    let second = number(&service.create_payment(&order_b, "alipay").await);
    assert_eq!(service.pay_at_channel(&second).await["outcome"], "paid");
    service.settled_trade(&second).await;
    assert_eq!(service.pay_at_channel(&stale).await["outcome"], "paid");
    // C: paid and partly refunded as usual; D on WeChat Pay, paid as usual.
    let (_, normal) = service.paid_payment("u-b", "alipay", 400).await;
    let refunded = service
        .post(
            &format!("/v1/payments/{normal}/refunds"),
            json!({"amount": 100, "reason": "退货"}),
            &[("Idempotency-Key", &unique("k"))],
        )
        .await;
    assert_eq!(refunded.status, 201, "{}", refunded.json());
    assert_eq!(refunded.json()["status"], "SUCCESS");
    service.paid_payment("u-b", "wechat", 500).await;
    // E: PAID here, never charged at the channel; paid (by its channel's word) a few seconds
    // ago, as a running day's bill run expects of what it looks for (`ASK_MARGIN_MS`).
    let order_e = unique("o");
    service.create_order(&order_e, "u-b", 610).await;
    let phantom = number(&service.create_payment(&order_e, "alipay").await);
    let outcome = service
        .state
        .ports
        .store
        .payments
        .apply_success(
            &phantom,
            &mideng_channel::adapter::Payment {
                channel_trade_no: "2026120300000000000000000001".to_owned(),
                amount_fen: 610,
                paid_at_ms: Some(service.state.ports.clock.now_ms() - 5_000),
            },
            None,
        )
        .await
        .expect("applied");
    assert!(
        matches!(outcome, mideng_pay::store::SuccessOutcome::Paid { .. }),
        "{outcome:?}"
    );
    assert_eq!(
        service.order(&order_a).await["status"],
        "CREATED",
        "nobody told us"
    );

    let alipay = run(&service, ChannelKind::Alipay).await;
    assert_eq!(
        (
            alipay.lines,
            alipay.matched,
            alipay.repaired,
            alipay.disagreements,
            alipay.cases_found
        ),
        (5, 3, 2, 3, 3),
        "A, B's two charges, C's charge and refund; A repaired as PAID, B's stale charge repaired as a refund case, E not on the bill: {alipay:?}"
    );
    assert_eq!(alipay.charged_fen, 150 + 230 + 230 + 400);
    assert_eq!(alipay.refunded_fen, 100);
    let wechat = run(&service, ChannelKind::Wechat).await;
    assert_eq!(
        (wechat.lines, wechat.matched, wechat.disagreements),
        (1, 1, 0),
        "{wechat:?}"
    );

    // A is PAID now, by the success flow: its order moved once.
    let order = service.order(&order_a).await;
    assert_eq!(
        (order["status"].as_str(), order["version"].as_i64()),
        (Some("PAID"), Some(1)),
        "{order}"
    );
    // B keeps one PAID payment; the stale charge is a refund case, open.
    let order = service.order(&order_b).await;
    let paid: Vec<_> = order["payments"]
        .as_array()
        .expect("payments")
        .iter()
        .filter(|payment| payment["status"] == "PAID")
        .collect();
    assert_eq!(paid.len(), 1, "{order}");
    let open_refund_cases = service
        .state
        .ports
        .store
        .refund_cases
        .open_cases(100)
        .await
        .expect("cases");
    assert!(
        open_refund_cases
            .iter()
            .any(|case| case.payment_no == stale),
        "{open_refund_cases:?}"
    );

    // A second run finds the same disagreements and records nothing again.
    let again = run(&service, ChannelKind::Alipay).await;
    assert_eq!(
        (
            again.matched,
            again.repaired,
            again.disagreements,
            again.cases_found
        ),
        (5, 0, 1, 0),
        "A matches now, B's stale charge matches its refund case; E is known: {again:?}"
    );

    // The tenant sees its cases, with their evidence; another tenant sees none of them.
    let listed = cases(&service).await;
    assert_eq!(listed.len(), 3, "{listed:#?}");
    assert_eq!(case_of(&listed, &lost)["status"], "REPAIRED");
    assert_eq!(case_of(&listed, &lost)["kind"], "CHARGED_NOT_PAID");
    assert_eq!(case_of(&listed, &stale)["status"], "REPAIRED");
    let phantom_case = case_of(&listed, &phantom);
    assert_eq!(
        (
            phantom_case["kind"].as_str(),
            phantom_case["status"].as_str()
        ),
        (Some("PAID_NOT_BILLED"), Some("OPEN"))
    );
    assert_eq!(phantom_case["ours"], 610);
    assert_eq!(phantom_case["billed"], Value::Null);
    let open = service
        .get("/v1/reconciliation/cases?status=OPEN")
        .await
        .json();
    assert_eq!(open["cases"].as_array().map(Vec::len), Some(1), "{open}");
    for bad in [
        "?status=open",
        "?limit=0",
        "?limit=101",
        "?status=OPEN&status=OPEN",
        "?other=1",
    ] {
        let answer = service.get(&format!("/v1/reconciliation/cases{bad}")).await;
        assert_eq!(answer.status, 400, "{bad}: {}", answer.json());
    }
    let other = Service::beside(&service, false).await;
    assert!(cases(&other).await.is_empty(), "another tenant's cases");

    // An operator resolves the open case on the console, with a reason; once.
    let case_id = phantom_case["case_id"].as_str().expect("id").to_owned();
    let resolve = |reason: &str, key: &str| {
        let request = service
            .client
            .post(format!("{}/console/cases/resolve", service.base))
            .bearer_auth(key)
            .json(&json!({"case_id": case_id, "reason": reason}));
        async move {
            let response = request.send().await.expect("answer");
            let status = response.status().as_u16();
            (
                status,
                response.json::<Value>().await.unwrap_or(Value::Null),
            )
        }
    };
    assert_eq!(
        resolve("checked", &service.api_key).await.0,
        401,
        "a tenant key is not the console's"
    );
    assert_eq!(
        resolve("", CONSOLE_KEY).await.0,
        422,
        "a reason is required"
    );
    assert_eq!(resolve("a\u{202e}b", CONSOLE_KEY).await.0, 422);
    let (status, resolved) = resolve("test charge by hand, never billed", CONSOLE_KEY).await;
    assert_eq!(status, 200, "{resolved}");
    assert_eq!(resolved["status"], "RESOLVED");
    assert!(
        resolved["resolution"]
            .as_str()
            .is_some_and(|text| text.contains("test charge by hand")),
        "{resolved}"
    );
    assert_eq!(resolve("again", CONSOLE_KEY).await.0, 409, "resolved once");
    let overview: Value = service
        .client
        .get(format!("{}/console/overview", service.base))
        .bearer_auth(CONSOLE_KEY)
        .send()
        .await
        .expect("answer")
        .json()
        .await
        .expect("json");
    assert_eq!(overview["cases"], json!([]), "no case is open any more");
}
