//! The `Idempotency-Key` layer on a bare axum app: the second request with the same key gets
//! the first answer, byte for byte, and the handler runs once.
//!
//! `cargo run -p mideng --example http_layer --features axum`

#![allow(clippy::print_stdout)]

use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::extract::State;
use axum::http::{HeaderName, Request};
use axum::routing::post;
use mideng::http::{IdempotencyLayer, RouteConfig, TenantSource, request_id};
use mideng::store::memory::MemoryStore;
use tower::ServiceExt;

/// Charges the card: every run is one more charge.
async fn charge(State(charges): State<Arc<AtomicU32>>, body: String) -> String {
    let number = charges.fetch_add(1, Ordering::SeqCst) + 1;
    format!("charge {number} for {body}")
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let records = Arc::new(MemoryStore::new());
    let route = RouteConfig::builder(records, "charges.create")
        .tenant(TenantSource::Header(HeaderName::from_static("x-tenant")))
        .funds()
        .build()?;
    let charges = Arc::new(AtomicU32::new(0));
    let app = Router::new()
        .route(
            "/charges",
            post(charge).route_layer(IdempotencyLayer::new(route)),
        )
        .layer(axum::middleware::from_fn(request_id))
        .with_state(charges.clone());

    for attempt in 1..=2 {
        let request = Request::post("/charges")
            .header("x-tenant", "shop-1")
            .header("idempotency-key", "order-1001-pay")
            .header("content-type", "application/json")
            .body(Body::from(r#"{"amount":1999}"#))?;
        let response = app.clone().oneshot(request).await?;
        let headers = response.headers().clone();
        let body = to_bytes(response.into_body(), 64 * 1024).await?;
        println!(
            "attempt {attempt}: {} replayed={:?} original-request-id={:?}",
            String::from_utf8_lossy(&body),
            headers.get("idempotent-replayed"),
            headers.get("original-request-id"),
        );
    }
    assert_eq!(
        charges.load(Ordering::SeqCst),
        1,
        "one charge for two requests"
    );
    Ok(())
}
