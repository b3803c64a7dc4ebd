//! The checkout's requests that carry no `Idempotency-Key`: an order created (sent once or
//! twice at once) and a payment posted twice without a key, under one token or two.
//!
//! Every order of the run is made here, by the merchant's server (the tenant's secret key),
//! and written down as it priced it before it is sent: the audit holds every order and every
//! grant of the run to that record.

use std::time::Duration;

use serde_json::{Value, json};

use super::clients::{Answer, RECENT_ORDERS_MAX, Shared, issue_token};
use crate::audit::Pricing;

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

/// What a create-order body prices: its order id and the order's buyer, amount and grant.
/// `None` for a body that is no order (the service refuses it too).
fn pricing_of(body: &Value) -> Option<(String, Pricing)> {
    let entitlement = match &body["entitlement"] {
        Value::Null => None,
        entitlement => Some((
            entitlement["sku"].as_str()?.to_owned(),
            entitlement["quantity"].as_i64()?,
        )),
    };
    Some((
        body["order_id"].as_str()?.to_owned(),
        Pricing {
            user_id: body["user_id"].as_str()?.to_owned(),
            amount: body["amount"].as_i64()?,
            entitlement,
        },
    ))
}

/// Sends the order creation `count` times at once (to neighbouring instances), with the
/// tenant's secret key: the merchant's server pricing an order. Written down first as the
/// merchant's (the audit's record of every order the run made), whatever the answers.
pub(crate) async fn create_order(
    shared: &Shared,
    instance: usize,
    tenant: usize,
    body: &Value,
    count: usize,
) -> Vec<Option<Answer>> {
    if let Some((order_id, pricing)) = pricing_of(body) {
        let tenant_id = shared.tenants[tenant % shared.tenants.len()].id.clone();
        let mut log = shared.log();
        let first = log
            .client
            .priced
            .get_or_insert_with(Default::default)
            .insert((tenant_id, order_id.clone()), pricing)
            .is_none();
        if first {
            if log.recent_orders.len() >= RECENT_ORDERS_MAX {
                log.recent_orders.pop_front();
            }
            log.recent_orders
                .push_back((tenant % shared.tenants.len(), order_id));
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_body_is_priced_as_the_service_stores_it() {
        let body = json!({"order_id": "o-1", "user_id": "u-1", "amount": 1999, "currency": "CNY",
            "entitlement": {"sku": "vip-month", "quantity": 2}});
        let (order, pricing) = pricing_of(&body).expect("an order");
        assert_eq!(order, "o-1");
        assert_eq!(
            pricing,
            Pricing {
                user_id: "u-1".to_owned(),
                amount: 1999,
                entitlement: Some(("vip-month".to_owned(), 2)),
            }
        );
        let plain = json!({"order_id": "o-2", "user_id": "u-1", "amount": 5, "currency": "CNY"});
        assert_eq!(pricing_of(&plain).expect("an order").1.entitlement, None);
    }
}
