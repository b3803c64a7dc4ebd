//! Two service instances sharing one database and one Redis, receiving the same requests (a
//! gateway resending to another node): one effect.

use std::sync::Arc;

use serde_json::json;

use crate::harness::{Backend, Service, race, unique};

pub(crate) async fn two_instances_one_effect(backend: Backend) {
    let first = Arc::new(Service::start(backend).await);
    let second = Arc::new(Service::beside(&first, true).await);
    let nodes = Arc::new([first.clone(), second.clone()]);

    // The same payment request, with its token and key, to both nodes at once.
    let order_id = unique("o");
    first.create_order(&order_id, "u-1", 1_234).await;
    let token = first.token().await;
    let key = unique("k");
    let answers = race(60, |index| {
        let (nodes, order_id, token, key) =
            (nodes.clone(), order_id.clone(), token.clone(), key.clone());
        async move {
            nodes[index % 2]
                .post(
                    &format!("/v1/orders/{order_id}/payments"),
                    json!({"channel": "wechat"}),
                    &[("Idempotency-Token", &token), ("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    let numbers: std::collections::BTreeSet<String> = answers
        .iter()
        .filter(|answer| matches!(answer.status, 200 | 201))
        .map(|answer| {
            answer.json()["payment_no"]
                .as_str()
                .expect("number")
                .to_owned()
        })
        .collect();
    assert_eq!(numbers.len(), 1, "one payment named by every node");
    assert!(
        answers
            .iter()
            .all(|answer| matches!(answer.status, 200 | 201 | 409)),
        "no failures"
    );
    // Fresh tokens from one node, spent on both.
    let mut tokens = Vec::new();
    for _ in 0..10 {
        tokens.push(second.token().await);
    }
    let tokens = Arc::new(tokens);
    let fresh = race(10, |index| {
        let (nodes, order_id, tokens) = (nodes.clone(), order_id.clone(), tokens.clone());
        async move {
            nodes[index % 2]
                .post(
                    &format!("/v1/orders/{order_id}/payments"),
                    json!({"channel": "wechat"}),
                    &[("Idempotency-Token", &tokens[index])],
                )
                .await
        }
    })
    .await;
    for answer in &fresh {
        assert_eq!(answer.status, 200, "the pending payment is answered");
        assert_eq!(
            answer.json()["payment_no"].as_str(),
            numbers.iter().next().map(String::as_str)
        );
    }
    assert_eq!(
        second.order(&order_id).await["payments"]
            .as_array()
            .map(Vec::len),
        Some(1)
    );

    // The same deduct to both nodes.
    let user = unique("u");
    let credited = first
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 1_000, "reference": "r"}),
            &[("Idempotency-Key", &unique("c"))],
        )
        .await;
    assert_eq!(credited.status, 200);
    let deduct_key = unique("d");
    let deducts = race(60, |index| {
        let (nodes, user, key) = (nodes.clone(), user.clone(), deduct_key.clone());
        async move {
            nodes[index % 2]
                .post(
                    &format!("/v1/wallets/{user}/deduct"),
                    json!({"order_id": "o-9", "amount": 400}),
                    &[("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    assert!(deducts.iter().any(|answer| answer.status == 200));
    assert!(
        deducts
            .iter()
            .all(|answer| matches!(answer.status, 200 | 409))
    );
    let wallet = second.get(&format!("/v1/wallets/{user}")).await.json();
    assert_eq!(wallet["balance"], 600, "debited once");

    // Paid at the channel; the notify reaches the first node, the second sees the result.
    let number = numbers.iter().next().expect("number").clone();
    first.pay_at_channel(&number).await;
    first.settled_trade(&number).await;
    let order = second.order(&order_id).await;
    assert_eq!(order["status"], "PAID");
    assert_eq!(order["version"], 1);

    // The channel created a trade through the first node but its answer was lost; the client's
    // retry reaches the second node, whose adapter names its own notify URL. The channel takes
    // that as the same request (a refusal here would fail an attempt the channel holds), and
    // the trade's notify still reaches the first node.
    for (channel, method) in [
        ("alipay", "alipay.trade.precreate"),
        ("wechat", "wechat.native"),
    ] {
        let order_id = unique("o");
        first.create_order(&order_id, "u-2", 2_345).await;
        first
            .sim_post(
                "/sim/fail-next",
                json!({"method": method, "apply_anyway": true}),
            )
            .await;
        let lost = first.create_payment(&order_id, channel).await;
        assert_eq!(lost.status, 202, "{}", lost.json());
        let number = lost.json()["payment_no"]
            .as_str()
            .expect("number")
            .to_owned();
        let retried = second.create_payment(&order_id, channel).await;
        assert_eq!(retried.status, 200, "{channel}: {}", retried.json());
        assert_eq!(retried.json()["payment_no"].as_str(), Some(number.as_str()));
        assert!(retried.json()["pay_url"].is_string(), "{}", retried.json());
        first.pay_at_channel(&number).await;
        first.settled_trade(&number).await;
        assert_eq!(second.order(&order_id).await["status"], "PAID");
    }
}
