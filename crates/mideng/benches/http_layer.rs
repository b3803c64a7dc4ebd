//! What the HTTP layer costs: the same router with and without it, first-time requests (a new
//! key each: `begin` + `complete`) and replays (one key: `begin` answers from the store), per
//! store, all in one run so the ratios compare like with like.
//!
//! ```sh
//! scripts/services up
//! cargo bench -p mideng --all-features --bench http_layer
//! MIDENG_BENCH_STORES=memory,sqlite cargo bench -p mideng --all-features --bench http_layer
//! ```
//!
//! Requests go through the router in process (`oneshot`), without sockets, so the figures are
//! the layer's own cost plus the store's round trips, not HTTP parsing.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use axum::Router;
use axum::body::{Body, to_bytes};
use axum::http::{HeaderName, Request, StatusCode, header};
use axum::routing::post;
use criterion::{Criterion, criterion_group, criterion_main};
use mideng::RecordStore;
use mideng::http::{IdempotencyLayer, RouteConfig, TenantSource};
use mideng::store::memory::MemoryStore;
use mideng::store::redis::RedisStore;
use mideng::store::sql::PoolSettings;
use mideng::store::sql::mysql::MySqlStore;
use mideng::store::sql::postgres::PostgresStore;
use mideng::store::sql::sqlite::SqliteStore;
use tower::ServiceExt;

const BODY: &str = r#"{"order_id":"o1001","channel":"alipay","amount":10000,"currency":"CNY"}"#;

async fn create_payment(body: String) -> (StatusCode, [(HeaderName, &'static str); 1], String) {
    (
        StatusCode::CREATED,
        [(header::CONTENT_TYPE, "application/json")],
        format!(
            r#"{{"payment_no":"P1001","status":"PENDING","request_bytes":{}}}"#,
            body.len()
        ),
    )
}

fn router(records: Option<Arc<dyn RecordStore>>) -> Router {
    let route = post(create_payment);
    let route = match records {
        None => route,
        Some(records) => route.route_layer(IdempotencyLayer::new(
            RouteConfig::builder(records, "payments.create")
                .tenant(TenantSource::Fixed("bench".to_owned()))
                .build()
                .expect("valid config"),
        )),
    };
    Router::new().route("/v1/orders/{order}/payments", route)
}

async fn call(router: &Router, key: &str) {
    let request = Request::post("/v1/orders/o1001/payments")
        .header("idempotency-key", key)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(BODY))
        .expect("valid request");
    let response = router.clone().oneshot(request).await.expect("infallible");
    assert_eq!(response.status(), StatusCode::CREATED);
    to_bytes(response.into_body(), usize::MAX)
        .await
        .expect("body");
}

fn wanted(store: &str) -> bool {
    std::env::var("MIDENG_BENCH_STORES").map_or(true, |list| {
        list.split(',').any(|name| name.trim() == store)
    })
}

async fn open(store: &str) -> Arc<dyn RecordStore> {
    let settings = PoolSettings::default();
    match store {
        "memory" => Arc::new(MemoryStore::new()),
        "sqlite" => {
            let path = std::env::temp_dir().join(format!("mideng-bench-{}.db", std::process::id()));
            let store = SqliteStore::connect(&format!("sqlite://{}", path.display()), settings)
                .await
                .expect("sqlite");
            store.migrate().await.expect("migrate");
            Arc::new(store)
        }
        "postgres" => {
            let url = std::env::var("MIDENG_TEST_POSTGRES_URL").unwrap_or_else(|_| {
                "postgres://mideng:mideng@127.0.0.1:5432/mideng_test".to_owned()
            });
            let store = PostgresStore::connect(&url, settings)
                .await
                .expect("postgres (scripts/services up)");
            store.migrate().await.expect("migrate");
            Arc::new(store)
        }
        "mysql" => {
            let url = std::env::var("MIDENG_TEST_MYSQL_URL")
                .unwrap_or_else(|_| "mysql://mideng:mideng@127.0.0.1:3306/mideng_test".to_owned());
            let store = MySqlStore::connect(&url, settings)
                .await
                .expect("mysql (scripts/services up)");
            store.migrate().await.expect("migrate");
            Arc::new(store)
        }
        _ => {
            let url = std::env::var("MIDENG_TEST_REDIS_URL")
                .unwrap_or_else(|_| "redis://127.0.0.1:6379/".to_owned());
            Arc::new(
                RedisStore::connect(&url)
                    .await
                    .expect("redis (scripts/services up)"),
            )
        }
    }
}

fn layer_overhead(criterion: &mut Criterion) {
    let runtime = tokio::runtime::Runtime::new().expect("runtime");
    let mut group = criterion.benchmark_group("http_layer");
    group
        .measurement_time(Duration::from_secs(4))
        .warm_up_time(Duration::from_secs(1))
        .sample_size(30);

    let bare = router(None);
    group.bench_function("without_layer", |bench| {
        bench.to_async(&runtime).iter(|| call(&bare, "unused"))
    });

    let run = std::process::id();
    for store in ["memory", "sqlite", "postgres", "mysql", "redis"] {
        if !wanted(store) {
            continue;
        }
        let records = runtime.block_on(open(store));
        let layered = router(Some(records));
        let counter = Arc::new(AtomicU64::new(0));
        group.bench_function(format!("{store}/first_time"), |bench| {
            bench.to_async(&runtime).iter(|| {
                let key = format!("bench-{run}-{}", counter.fetch_add(1, Ordering::Relaxed));
                let layered = layered.clone();
                async move { call(&layered, &key).await }
            })
        });
        let replay_key = format!("bench-{run}-replay");
        runtime.block_on(call(&layered, &replay_key));
        group.bench_function(format!("{store}/replay"), |bench| {
            bench
                .to_async(&runtime)
                .iter(|| call(&layered, &replay_key))
        });
    }
    group.finish();
}

criterion_group!(benches, layer_overhead);
criterion_main!(benches);
