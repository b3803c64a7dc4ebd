//! The clock guard: an instance whose clock is far from the database's refuses what would act
//! on it, and takes requests again once the clocks agree.

use std::sync::Arc;

use mideng_pay::flows::clock_guard;
use serde_json::json;

use crate::harness::{Backend, Service, Shifted, unique};

pub(crate) async fn a_clock_far_from_the_databases_refuses_until_it_agrees(backend: Backend) {
    let service = Service::start(backend).await;
    let order_id = unique("o");
    service.create_order(&order_id, "u-1", 500).await;

    // The same instance, read through a clock 400 s ahead (as if NTP had failed): the guard it
    // shares with the running API records the verdict.
    let mut skewed = service.state.ports.clone();
    skewed.clock = Arc::new(Shifted(400_000));
    let reading = clock_guard::check(&skewed)
        .await
        .expect("the database tells its time");
    assert!(
        (399_000..=401_000).contains(&reading.skew_ms),
        "the skew read against the database: {reading:?}"
    );
    assert!(service.state.ports.clock_guard.refuses());

    let refused = service
        .post(
            "/v1/orders",
            json!({"order_id": unique("o"), "user_id": "u-1", "amount": 500, "currency": "CNY"}),
            &[],
        )
        .await;
    assert_eq!(refused.status, 503, "{}", refused.json());
    assert_eq!(refused.json()["code"], "clock-unsynchronised");
    assert!(refused.headers.contains_key("retry-after"));
    let notify = service
        .post("/v1/channels/wechat/notify", json!({}), &[])
        .await;
    assert_eq!(
        notify.status, 503,
        "a channel's notify waits too (it is resent)"
    );
    assert_eq!(service.get("/readyz").await.status, 503);
    assert_eq!(
        service.get("/healthz").await.status,
        200,
        "alive, only not ready"
    );

    // Behind by as much: the same verdict.
    skewed.clock = Arc::new(Shifted(-400_000));
    clock_guard::check(&skewed)
        .await
        .expect("the database tells its time");
    assert!(service.state.ports.clock_guard.refuses());

    // A few seconds off is within the bound (10 s by default): taken.
    skewed.clock = Arc::new(Shifted(3_000));
    clock_guard::check(&skewed)
        .await
        .expect("the database tells its time");
    assert!(!service.state.ports.clock_guard.refuses());
    assert_eq!(service.get("/readyz").await.status, 200);
    let order = service.get(&format!("/v1/orders/{order_id}")).await;
    assert_eq!(order.status, 200, "{}", order.json());
}
