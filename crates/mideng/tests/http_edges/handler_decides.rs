//! The layer's answers when the handler decides what is stored (`IdempotencyContext`).

use super::*;
use mideng::http::{IdempotencyContext, IdempotencyDecision};
use mideng::store::sql::sqlite::SqliteStore;
use mideng::{Decision, StoredResponse};

/// Inserts the payment and completes the record in one transaction: the effect and its
/// stored answer commit together or not at all.
async fn create_payment(
    State(store): State<SqliteStore>,
    decision: IdempotencyDecision,
    context: IdempotencyContext,
) -> axum::response::Response {
    if let Some(answer) = decision.standard_response() {
        return answer;
    }
    let Decision::Proceed(lease) = &decision.decision else {
        unreachable!("standard_response covers the rest")
    };
    let mut transaction = store.begin_write().await.expect("begin");
    let payment_no = format!("P-{}", context.fence.unwrap_or_default());
    mideng::sqlx::query("INSERT INTO demo_payments (payment_no, idempotency_key) VALUES ($1, $2)")
        .bind(&payment_no)
        .bind(decision.key.as_str())
        .execute(&mut *transaction)
        .await
        .expect("insert");
    // Long enough that racing duplicates find the key in flight.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let answer = StoredResponse {
        status: 201,
        headers: vec![("content-type".to_owned(), "application/json".to_owned())],
        body: format!(r#"{{"payment_no":"{payment_no}"}}"#).into_bytes(),
    };
    store
        .complete_in(&mut transaction, lease, &answer)
        .await
        .expect("complete_in");
    transaction.commit().await.expect("commit");
    axum::response::Response::builder()
        .status(201)
        .header(header::CONTENT_TYPE, "application/json")
        .body(Body::from(answer.body))
        .expect("response")
}

/// The payment route on a fresh SQLite store, with `wait` for in-flight duplicates if any.
async fn payment_app(wait: Option<Duration>) -> (SqliteStore, Router) {
    let store = support::sqlite_store().await;
    mideng::sqlx::raw_sql(
        "CREATE TABLE demo_payments (payment_no TEXT PRIMARY KEY, idempotency_key TEXT NOT NULL)",
    )
    .execute(store.pool())
    .await
    .expect("table");
    let mut config = RouteConfig::builder(Arc::new(store.clone()), "payments.create")
        .tenant(TenantSource::Fixed("t1".to_owned()))
        .handler_decides();
    if let Some(wait) = wait {
        config = config.wait_for_in_flight(wait);
    }
    let app = Router::new()
        .route(
            "/pay",
            post(create_payment)
                .route_layer(IdempotencyLayer::new(config.build().expect("config"))),
        )
        .with_state(store.clone());
    (store, app)
}

async fn count_payments(store: &SqliteStore) -> i64 {
    mideng::sqlx::query_scalar("SELECT COUNT(*) FROM demo_payments")
        .fetch_one(store.pool())
        .await
        .expect("count")
}

fn pay_request() -> Request<Body> {
    Request::post("/pay")
        .header("idempotency-key", "k1")
        .body(Body::from("{}"))
        .expect("request")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_that_decides_lets_duplicates_wait_for_the_first_answer() {
    let (store, app) = payment_app(Some(Duration::from_secs(5))).await;
    let answers = race(20, |_| {
        let app = app.clone();
        async move { send(&app, pay_request()).await }
    })
    .await;
    assert_eq!(count_payments(&store).await, 1, "one effect");
    let first = answers
        .iter()
        .find(|(_, headers, _)| !headers.contains_key(&IDEMPOTENT_REPLAYED))
        .expect("one request ran the handler");
    for (status, _, body) in &answers {
        assert_eq!(*status, StatusCode::CREATED, "no 409 while the wait lasts");
        assert_eq!(
            body, &first.2,
            "every answer is the first one, byte for byte"
        );
    }
    assert_eq!(
        answers
            .iter()
            .filter(|(_, headers, _)| headers.contains_key(&IDEMPOTENT_REPLAYED))
            .count(),
        19,
        "the rest are replays"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_handler_completes_the_record_in_its_own_transaction() {
    let (store, app) = payment_app(None).await;
    let answers = race(20, |_| {
        let app = app.clone();
        async move {
            let request = Request::post("/pay")
                .header("idempotency-key", "k1")
                .body(Body::from("{}"))
                .expect("request");
            send(&app, request).await
        }
    })
    .await;
    assert_eq!(
        count_payments(&store).await,
        1,
        "one effect for 20 concurrent requests"
    );
    let created: Vec<_> = answers
        .iter()
        .filter(|(status, headers, _)| {
            *status == StatusCode::CREATED && !headers.contains_key(&IDEMPOTENT_REPLAYED)
        })
        .collect();
    assert_eq!(created.len(), 1);
    assert!(
        answers
            .iter()
            .all(|(status, _, _)| matches!(*status, StatusCode::CREATED | StatusCode::CONFLICT))
    );
    let later = send(
        &app,
        Request::post("/pay")
            .header("idempotency-key", "k1")
            .body(Body::from("{}"))
            .expect("request"),
    )
    .await;
    assert_eq!(
        (
            later.0,
            later.1.contains_key(&IDEMPOTENT_REPLAYED),
            &later.2
        ),
        (StatusCode::CREATED, true, &created[0].2)
    );
}
