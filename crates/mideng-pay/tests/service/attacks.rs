//! Notifies as an attacker sends them: genuine ones retargeted by repeating their names, one
//! channel's notify for the other channel's payment, another tenant's payment, WeChat
//! notifies replayed long after they were signed or under a serial we do not know. None may
//! move money; the genuine notify alone still does.

use mideng_channel::keys::aes_gcm_encrypt;
use mideng_channel::wechat;
use serde_json::json;

use crate::harness::{Backend, Service, fixture_channel_key, sim_identity, unique};
use crate::payments::{alipay_notify, payment_no};

/// Posts an Alipay notify body; the channel's answer text.
async fn post_alipay(service: &Service, body: String) -> String {
    let answer = service
        .client
        .post(format!("{}/v1/channels/alipay/notify", service.base))
        .header("content-type", "application/x-www-form-urlencoded")
        .body(body)
        .send()
        .await
        .expect("answer");
    assert_eq!(
        answer.status(),
        200,
        "Alipay reads the body, not the status"
    );
    answer.text().await.expect("body")
}

/// A WeChat Pay notification of a success for `out_trade_no`, encrypted and signed as the
/// platform does, at `signed_at_secs` under `serial`.
fn wechat_success(
    out_trade_no: &str,
    amount_fen: i64,
    signed_at_secs: i64,
    serial: &str,
) -> (Vec<(String, String)>, String) {
    let (config, _) = sim_identity();
    let transaction = json!({
        "mchid": config.wechat_mchid, "appid": config.wechat_appid, "out_trade_no": out_trade_no,
        // A channel's transaction number is unique for good (one payment per channel trade):
        // a fresh one per notify, as the channel's would be.
        "transaction_id": unique("4200"), "trade_state": "SUCCESS",
        "success_time": wechat::format_rfc3339(signed_at_secs * 1000),
        "amount": {"total": amount_fen, "payer_total": amount_fen, "currency": "CNY"},
    });
    signed_wechat_notify(
        "TRANSACTION.SUCCESS",
        "transaction",
        &transaction.to_string(),
        signed_at_secs,
        serial,
        &fixture_channel_key(),
    )
}

/// A WeChat Pay notification of `event_type` whose resource (`original_type` and associated
/// data `resource_type`) encrypts `plaintext`, signed by `key` at `signed_at_secs` under
/// `serial`.
fn signed_wechat_notify(
    event_type: &str,
    resource_type: &str,
    plaintext: &str,
    signed_at_secs: i64,
    serial: &str,
    key: &mideng_channel::keys::PrivateKey,
) -> (Vec<(String, String)>, String) {
    let (config, _) = sim_identity();
    let ciphertext = aes_gcm_encrypt(
        config.wechat_api_v3_key.as_bytes(),
        b"abcdefghijkl",
        resource_type.as_bytes(),
        plaintext.as_bytes(),
    )
    .expect("encrypt");
    let body = json!({
        "id": unique("EV"), "create_time": wechat::format_rfc3339(signed_at_secs * 1000),
        "event_type": event_type, "resource_type": "encrypt-resource", "summary": "通知",
        "resource": {"algorithm": "AEAD_AES_256_GCM", "ciphertext": ciphertext,
                     "associated_data": resource_type, "nonce": "abcdefghijkl", "original_type": resource_type},
    })
    .to_string();
    let timestamp = signed_at_secs.to_string();
    let signature = key
        .sign(wechat::notify_message(&timestamp, "NONCE1", &body).as_bytes())
        .expect("sign");
    let headers = vec![
        (wechat::HEADER_TIMESTAMP.to_owned(), timestamp),
        (wechat::HEADER_NONCE.to_owned(), "NONCE1".to_owned()),
        (wechat::HEADER_SIGNATURE.to_owned(), signature),
        (wechat::HEADER_SERIAL.to_owned(), serial.to_owned()),
        (
            wechat::HEADER_SIGNATURE_TYPE.to_owned(),
            wechat::AUTHORIZATION_SCHEME.to_owned(),
        ),
    ];
    (headers, body)
}

async fn post_wechat(service: &Service, (headers, body): (Vec<(String, String)>, String)) -> u16 {
    let mut request = service
        .client
        .post(format!("{}/v1/channels/wechat/notify", service.base))
        .header("content-type", "application/json")
        .body(body);
    for (name, value) in headers {
        request = request.header(name, value);
    }
    request.send().await.expect("answer").status().as_u16()
}

fn now_secs() -> i64 {
    mideng::clock::now_ms().div_euclid(1000)
}

pub(crate) async fn hostile_notifies_move_no_money(backend: Backend) {
    let attacker = Service::start(backend).await;
    let victim = Service::beside(&attacker, false).await;
    let (config, _) = sim_identity();
    let app_id = config.alipay_app_id.as_str();

    // The victim (another tenant): an 8,888.00 order paying by Alipay, one paying by WeChat.
    let (victim_alipay_order, victim_wechat_order) = (unique("v"), unique("v"));
    victim
        .create_order(&victim_alipay_order, "u-v", 888_800)
        .await;
    victim
        .create_order(&victim_wechat_order, "u-v", 888_800)
        .await;
    let victim_alipay = payment_no(
        &victim
            .create_payment(&victim_alipay_order, "alipay")
            .await
            .json(),
    );
    let victim_wechat = payment_no(
        &victim
            .create_payment(&victim_wechat_order, "wechat")
            .await
            .json(),
    );

    // The attacker's own 1-fen payment, and the channel's genuine notify for it.
    let attacker_order = unique("a");
    attacker.create_order(&attacker_order, "u-a", 1).await;
    let own = payment_no(
        &attacker
            .create_payment(&attacker_order, "alipay")
            .await
            .json(),
    );
    let genuine_trade_no = unique("2026113022001400");
    let genuine_fields = [
        ("app_id", app_id),
        ("notify_id", "genuine-notify-1"),
        ("notify_time", "2026-11-30 10:00:00"),
        ("out_trade_no", own.as_str()),
        ("total_amount", "0.01"),
        ("trade_no", genuine_trade_no.as_str()),
        ("trade_status", "TRADE_SUCCESS"),
    ];
    let genuine = alipay_notify(&fixture_channel_key(), &genuine_fields);

    // 1. Retargeted: the victim's number, amount, a fresh notify id before the genuine form.
    for prefix in [
        format!(
            "out_trade_no={victim_alipay}&total_amount=8888.00&notify_id=fresh-1&trade_no=2026113022001400000000099999&"
        ),
        format!("out_trade_no={victim_wechat}&total_amount=8888.00&notify_id=fresh-2&"),
        "trade_status=TRADE_CLOSED&".to_owned(),
    ] {
        assert_eq!(
            post_alipay(&attacker, format!("{prefix}{genuine}")).await,
            "failure",
            "{prefix}"
        );
        assert_eq!(
            post_alipay(
                &attacker,
                format!("{genuine}&{}", prefix.trim_end_matches('&'))
            )
            .await,
            "failure",
            "appended: {prefix}"
        );
    }

    // 2. Across channels: a correctly signed Alipay success for the victim's WeChat payment.
    let cross = alipay_notify(
        &fixture_channel_key(),
        &[
            ("app_id", app_id),
            ("notify_id", "cross-1"),
            ("notify_time", "2026-11-30 10:00:00"),
            ("out_trade_no", victim_wechat.as_str()),
            ("total_amount", "8888.00"),
            ("trade_no", "2026113022001400000000088888"),
            ("trade_status", "TRADE_SUCCESS"),
        ],
    );
    assert_eq!(post_alipay(&attacker, cross).await, "failure");

    // 3. WeChat: a genuine success replayed a day after it was signed; one under a serial we
    //    were never given. Both are refused with a 4xx, not a 5xx.
    let serial = config.wechat_platform_serial.as_str();
    assert_eq!(
        post_wechat(
            &attacker,
            wechat_success(&victim_wechat, 888_800, now_secs() - 86_400, serial)
        )
        .await,
        400
    );
    assert_eq!(
        post_wechat(
            &attacker,
            wechat_success(
                &victim_wechat,
                888_800,
                now_secs(),
                "PUB_KEY_ID_0000000000000000000000000000000099"
            )
        )
        .await,
        400
    );
    let mut doubled = wechat_success(&victim_wechat, 888_800, now_secs(), serial);
    doubled
        .0
        .push((wechat::HEADER_TIMESTAMP.to_owned(), now_secs().to_string()));
    assert_eq!(post_wechat(&attacker, doubled).await, 400);

    // Nothing moved: every payment still waits, every order is still unpaid.
    for (service, order_id) in [
        (&victim, &victim_alipay_order),
        (&victim, &victim_wechat_order),
        (&attacker, &attacker_order),
    ] {
        let order = service.order(order_id).await;
        assert_eq!(order["status"], "CREATED", "{order}");
        assert_eq!(order["payments"][0]["status"], "PENDING", "{order}");
        assert_eq!(
            order["payments"][0]["channel_trade_no"],
            serde_json::Value::Null,
            "{order}"
        );
    }

    // The same genuine notifies, unaltered and fresh, are accepted: the refusals above were
    // the attacks', not the notifies'.
    assert_eq!(post_alipay(&attacker, genuine).await, "success");
    assert_eq!(attacker.order(&attacker_order).await["status"], "PAID");
    assert_eq!(
        post_wechat(
            &victim,
            wechat_success(&victim_wechat, 888_800, now_secs(), serial)
        )
        .await,
        204
    );
    assert_eq!(victim.order(&victim_wechat_order).await["status"], "PAID");
    assert_eq!(
        victim.order(&victim_alipay_order).await["status"],
        "CREATED"
    );
}

/// Refund notifies an attacker can make: platform-signed ones that name a refund of another
/// payment or another amount, one signed by someone else, one replayed a day later. Each is
/// refused with a 4xx and the refund stays as it was; the genuine state still settles it.
pub(crate) async fn hostile_refund_notifies_settle_nothing(backend: Backend) {
    let service = Service::start(backend).await;
    let (config, _) = sim_identity();
    let serial = config.wechat_platform_serial.as_str();
    let mut paid = Vec::new();
    for _ in 0..2 {
        let order_id = unique("o");
        service.create_order(&order_id, "u-a", 2_000).await;
        let number = payment_no(&service.create_payment(&order_id, "wechat").await.json());
        service
            .sim_put(
                "/sim/notify-policy",
                json!({"mode": "drop", "out_trade_no": number}),
            )
            .await;
        service.pay_at_channel(&number).await;
        service.settled_trade(&number).await;
        let settings = mideng_pay::workers::reconcile::ReconcileSettings {
            min_age: std::time::Duration::ZERO,
            tenant: Some(service.tenant.clone()),
            ..mideng_pay::workers::reconcile::ReconcileSettings::default()
        };
        mideng_pay::workers::reconcile::reconcile_once(&service.state.ports, &settings)
            .await
            .expect("round");
        paid.push(number);
    }
    // A WeChat refund answers PROCESSING; its notify is dropped with the trade's.
    let refund = service
        .post(
            &format!("/v1/payments/{}/refunds", paid[0]),
            json!({"amount": 500}),
            &[("Idempotency-Key", &unique("rk"))],
        )
        .await;
    assert_eq!(refund.status, 201, "{}", refund.json());
    assert_eq!(refund.json()["status"], "PROCESSING", "{}", refund.json());
    let refund_no = refund.json()["refund_no"]
        .as_str()
        .expect("number")
        .to_owned();
    let notice = |out_trade_no: &str, refund: i64| {
        serde_json::to_string(&wechat::RefundNotice {
            mchid: config.wechat_mchid.clone(),
            out_trade_no: out_trade_no.to_owned(),
            transaction_id: None,
            out_refund_no: refund_no.clone(),
            refund_id: unique("5030"),
            refund_status: "CLOSED".to_owned(),
            success_time: None,
            user_received_account: None,
            amount: wechat::RefundAmount {
                total: 2_000,
                refund,
                payer_total: None,
                payer_refund: None,
                currency: None,
            },
        })
        .expect("json")
    };
    let closed = |plaintext: String, signed_at: i64, key: &mideng_channel::keys::PrivateKey| {
        signed_wechat_notify(
            wechat::EVENT_REFUND_CLOSED,
            wechat::REFUND_ASSOCIATED_DATA,
            &plaintext,
            signed_at,
            serial,
            key,
        )
    };
    let forger = mideng_channel::keys::PrivateKey::from_pem(include_str!(
        "../../../mideng-channel/tests/fixtures/merchant-private.pem"
    ))
    .expect("key");
    for (what, notify) in [
        (
            "the refund named under another payment",
            closed(notice(&paid[1], 500), now_secs(), &fixture_channel_key()),
        ),
        (
            "another amount",
            closed(notice(&paid[0], 2_000), now_secs(), &fixture_channel_key()),
        ),
        (
            "signed by someone else",
            closed(notice(&paid[0], 500), now_secs(), &forger),
        ),
        (
            "a day old",
            closed(
                notice(&paid[0], 500),
                now_secs() - 86_400,
                &fixture_channel_key(),
            ),
        ),
    ] {
        assert_eq!(post_wechat(&service, notify).await, 400, "{what}");
        let shown = service
            .get(&format!("/v1/refunds/{refund_no}"))
            .await
            .json();
        assert_eq!(shown["status"], "PROCESSING", "{what}: {shown}");
    }
    let payment = service
        .get(&format!("/v1/payments/{}", paid[0]))
        .await
        .json();
    assert_eq!(payment["refundable"], 1_500, "nothing freed: {payment}");
}
