//! The checkout's requests that carry no `Idempotency-Key`: an order created (sent once or
//! twice at once) and a payment posted twice without a key, under one token or two.

use std::time::Duration;

use serde_json::{Value, json};

use super::clients::{Answer, Shared, issue_token};

/// A checkout without `Idempotency-Key`: the same form posted twice with one token (the token
/// layer refuses the second), or from two tabs with two tokens (the order lock and the
/// one-pending constraint give both the same payment).
pub(super) async fn keyless_double_click(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    order_id: &str,
    channel: &str,
) {
    let instance = rng.usize(..shared.bases.len());
    let Some(first) = issue_token(shared, tenant, instance).await else {
        return;
    };
    let two_tabs = rng.bool();
    let second = if two_tabs {
        shared.count("two tabs, two tokens, no key");
        issue_token(shared, tenant, instance).await
    } else {
        shared.count("double click, one token, no key");
        Some(first.clone())
    };
    let Some(second) = second else {
        return;
    };
    let path = format!("/v1/orders/{order_id}/payments");
    let body = json!({"channel": channel});
    let send = |token: String, instance: usize| {
        let path = path.clone();
        let body = body.clone();
        async move {
            shared
                .send(
                    instance,
                    tenant,
                    reqwest::Method::POST,
                    &path,
                    Some(&body),
                    &[("Idempotency-Token", token.as_str())],
                    Duration::from_secs(20),
                )
                .await
        }
    };
    let (one, two) = tokio::join!(send(first, instance), send(second, instance + 1));
    for answer in [one, two].into_iter().flatten() {
        if let Some(number) = answer.json()["payment_no"].as_str() {
            shared.log().payments.insert(number.to_owned());
        }
    }
}

/// Sends the order creation `count` times at once (to neighbouring instances).
pub(crate) async fn create_order(
    shared: &Shared,
    instance: usize,
    tenant: usize,
    body: &Value,
    count: usize,
) -> Vec<Option<Answer>> {
    let first = shared.send(
        instance,
        tenant,
        reqwest::Method::POST,
        "/v1/orders",
        Some(body),
        &[],
        Duration::from_secs(20),
    );
    if count < 2 {
        return vec![first.await];
    }
    let second = shared.send(
        instance + 1,
        tenant,
        reqwest::Method::POST,
        "/v1/orders",
        Some(body),
        &[],
        Duration::from_secs(20),
    );
    let (first, second) = tokio::join!(first, second);
    vec![first, second]
}
