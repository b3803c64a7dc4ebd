//! The layer's answers when the handler begins the record itself (`handler_begins`).

use super::*;
use mideng::http::IdempotencyClaim;
use mideng::store::cached::CachedRecords;
use mideng::store::sql::postgres::PostgresStore;
use mideng::{Decision, StoredResponse};

/// Begins the record, inserts the payment and completes the record in one transaction
/// (one commit); with `x-fail`, fails after the insert, so that everything rolls back.
async fn create_payment(
    State(store): State<PostgresStore>,
    claim: IdempotencyClaim,
    headers: axum::http::HeaderMap,
) -> axum::response::Response {
    let fail = headers.contains_key("x-fail");
    let (store, claim_ref) = (&store, &claim);
    let outcome = store
        .write(|transaction| {
            Box::pin(async move {
                let claim = claim_ref;
                let decision = store
                    .begin_in(
                        transaction,
                        &claim.scope,
                        &claim.key,
                        &claim.fingerprint,
                        &claim.policy,
                    )
                    .await?;
                let Decision::Proceed(lease) = decision else {
                    return Ok(Err(decision));
                };
                let payment_no = format!("P-{}", unique("p"));
                mideng::sqlx::query(
                    "INSERT INTO demo_begun_payments (payment_no, tenant, idempotency_key) VALUES ($1, $2, $3)",
                )
                .bind(&payment_no)
                .bind(claim.scope.tenant())
                .bind(claim.key.as_str())
                .execute(&mut **transaction)
                .await
                .map_err(|error| StoreError::Unavailable(error.to_string()))?;
                // Long enough that racing duplicates meet the record's row lock.
                tokio::time::sleep(Duration::from_millis(50)).await;
                if fail {
                    return Err(StoreError::Unavailable("failed on purpose".to_owned()));
                }
                let answer = StoredResponse {
                    status: 201,
                    headers: vec![("content-type".to_owned(), "application/json".to_owned())],
                    body: format!(r#"{{"payment_no":"{payment_no}"}}"#).into_bytes(),
                };
                store.complete_in(transaction, &lease, &answer).await?;
                Ok(Ok(answer))
            })
        })
        .await;
    match outcome {
        Ok(Ok(answer)) => {
            claim.stored(&answer);
            axum::response::Response::builder()
                .status(answer.status)
                .body(Body::from(answer.body))
                .expect("response")
        }
        Ok(Err(decision)) => claim.decided(&decision).await.expect("not a proceed"),
        Err(_) => axum::response::IntoResponse::into_response(StatusCode::SERVICE_UNAVAILABLE),
    }
}

/// The payment route on PostgreSQL for a tenant of its own, its records behind a replay
/// cache.
async fn payment_app() -> (
    PostgresStore,
    Arc<CachedRecords<PostgresStore>>,
    String,
    Router,
) {
    let store = support::postgres_store().await;
    // Two test processes creating the table at once collide in PostgreSQL's catalog even
    // with IF NOT EXISTS; a transaction-scoped advisory lock serialises them (a
    // multi-statement simple query is one implicit transaction).
    mideng::sqlx::raw_sql(
        "SELECT pg_advisory_xact_lock(727001); \
         CREATE TABLE IF NOT EXISTS demo_begun_payments (payment_no TEXT PRIMARY KEY, \
         tenant TEXT NOT NULL, idempotency_key TEXT NOT NULL)",
    )
    .execute(store.pool())
    .await
    .expect("table");
    let cached =
        Arc::new(CachedRecords::new(store.clone(), 100, Duration::from_secs(60)).expect("cache"));
    let tenant = unique("t");
    let config = RouteConfig::builder(cached.clone(), "payments.create")
        .tenant(TenantSource::Fixed(tenant.clone()))
        .handler_begins()
        .build()
        .expect("config");
    let app = Router::new()
        .route(
            "/pay",
            post(create_payment).route_layer(IdempotencyLayer::new(config)),
        )
        .with_state(store.clone());
    (store, cached, tenant, app)
}

async fn count_payments(store: &PostgresStore, tenant: &str) -> i64 {
    mideng::sqlx::query_scalar("SELECT COUNT(*) FROM demo_begun_payments WHERE tenant = $1")
        .bind(tenant)
        .fetch_one(store.pool())
        .await
        .expect("count")
}

fn pay_request(key: &str, body: &'static str, fail: bool) -> Request<Body> {
    let mut builder = Request::post("/pay").header("idempotency-key", key);
    if fail {
        builder = builder.header("x-fail", "1");
    }
    builder.body(Body::from(body)).expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn one_commit_one_effect_and_duplicates_wait_on_the_record_row() {
    let (store, cached, tenant, app) = payment_app().await;
    let answers = race(20, |_| {
        let app = app.clone();
        async move { send(&app, pay_request("k1", "{}", false)).await }
    })
    .await;
    assert_eq!(count_payments(&store, &tenant).await, 1, "one effect");
    let first: Vec<_> = answers
        .iter()
        .filter(|(_, headers, _)| !headers.contains_key(&IDEMPOTENT_REPLAYED))
        .collect();
    assert_eq!(first.len(), 1, "one request ran: {answers:?}");
    for (status, _, body) in &answers {
        assert_eq!(*status, StatusCode::CREATED, "a duplicate waits, never 409");
        assert_eq!(
            body, &first[0].2,
            "every answer is the first, byte for byte"
        );
    }
    assert_eq!(cached.len(), 1, "the stored answer is in the cache");
    let again = send(&app, pay_request("k1", "{}", false)).await;
    assert_eq!(
        (
            again.0,
            again.1.contains_key(&IDEMPOTENT_REPLAYED),
            &again.2
        ),
        (StatusCode::CREATED, true, &first[0].2)
    );
    let other = send(&app, pay_request("k1", r#"{"other":1}"#, false)).await;
    assert_eq!(other.0, StatusCode::UNPROCESSABLE_ENTITY, "{}", other.2);
    assert_eq!(count_payments(&store, &tenant).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_failed_transaction_leaves_no_record_and_the_retry_runs() {
    let (store, cached, tenant, app) = payment_app().await;
    let failed = send(&app, pay_request("k2", "{}", true)).await;
    assert_eq!(failed.0, StatusCode::SERVICE_UNAVAILABLE);
    assert!(cached.is_empty(), "nothing stored, nothing cached");
    assert_eq!(
        count_payments(&store, &tenant).await,
        0,
        "the effect rolled back"
    );
    let scope = Scope::new(&tenant, "payments.create").expect("scope");
    let key = mideng::IdempotencyKey::parse("k2").expect("key");
    assert!(
        mideng::RecordStore::find_record(&store, &scope, &key)
            .await
            .expect("find")
            .is_none(),
        "and its record with it: nothing to free, nothing to wait for"
    );
    let retried = send(&app, pay_request("k2", "{}", false)).await;
    assert_eq!(retried.0, StatusCode::CREATED, "{}", retried.2);
    assert!(!retried.1.contains_key(&IDEMPOTENT_REPLAYED));
    assert_eq!(count_payments(&store, &tenant).await, 1);
    assert_eq!(cached.len(), 1, "the answer is cached as it is stored");
}

#[test]
fn a_token_guard_cannot_be_combined_with_a_handler_that_begins() {
    let store = Arc::new(MemoryStore::new());
    let built = RouteConfig::builder(store.clone(), "payments.create")
        .handler_begins()
        .token_guard(TokenGuard::new(store))
        .build();
    assert!(built.is_err());
}
