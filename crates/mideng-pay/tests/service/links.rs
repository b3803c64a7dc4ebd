//! The database link misbehaving: a commit whose answer never came back. The service cannot
//! know whether it happened; the client's retry under the same key must land on what did.

use mideng_pay::flows::PaymentSettings;
use mideng_pay::testing::{LinkFault, Proxy};
use serde_json::json;

use crate::harness::{Backend, Service, queue_events, unique};

/// `url` with its `host:port` replaced by the proxy's loopback port, and the `host:port` it
/// named.
fn through(url: &str, port: u16) -> (String, String) {
    let (scheme, rest) = url.split_once("://").expect("a URL");
    let (credentials, rest) = rest.rsplit_once('@').expect("credentials");
    let (address, path) = rest.split_once('/').expect("a database");
    (
        format!("{scheme}://{credentials}@127.0.0.1:{port}/{path}"),
        address.to_owned(),
    )
}

pub(crate) async fn a_commit_whose_answer_is_lost_is_settled_by_the_retry(backend: Backend) {
    // This test's process counts what the service counts (each test runs in its own process).
    let metrics = metrics_exporter_prometheus::PrometheusBuilder::new()
        .install_recorder()
        .expect("the process's only recorder");
    let direct = backend.database_url();
    let (_, address) = through(&direct, 0);
    let proxy = Proxy::start(&address).await.expect("the link");
    let (url, _) = through(&direct, proxy.port());
    let service = Service::start_on(
        backend,
        url,
        None,
        None,
        PaymentSettings::default(),
        queue_events(),
    )
    .await;
    let user = unique("u");
    let key = unique("credit");
    let credited = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 1_000, "reference": key}),
            &[("Idempotency-Key", &key)],
        )
        .await;
    assert_eq!(credited.status, 200, "{}", credited.json());

    // The deduct (its key's record, the debit, the entry, the stored answer) commits, and the
    // answer is lost on the way back: on PostgreSQL the answer to its one statement, which
    // commits itself (its text goes with its first run on a connection, and it is the only
    // statement that writes a record), elsewhere the answer to its transaction's COMMIT.
    proxy.set_fault(match backend {
        Backend::Postgres => LinkFault::AnswersLostAfter(b"INSERT INTO mideng_records"),
        _ => LinkFault::CommitAnswersLost,
    });
    let path = format!("/v1/wallets/{user}/deduct");
    let deduct = || {
        service.post(
            &path,
            json!({"order_id": "o-1", "amount": 300}),
            &[("Idempotency-Key", "deduct-1")],
        )
    };
    let unknown = deduct().await;
    proxy.set_fault(LinkFault::None);
    assert!(proxy.commits_swallowed() >= 1, "the fault was met");
    assert_eq!(unknown.status, 503, "{}", unknown.json());
    assert_eq!(unknown.code(), "database-unavailable");
    assert!(unknown.header("retry-after").is_some());
    // Told apart from "the database is down": counted as an unknown outcome.
    let counted = metrics.render();
    assert!(
        counted.lines().any(
            |line| line.starts_with("mideng_commit_outcome_unknown_total{")
                && !line.ends_with(" 0")
        ),
        "{counted}"
    );

    // The retry under the same key finds the committed work: its stored answer, replayed; the
    // money moved once.
    let retried = deduct().await;
    assert_eq!(retried.status, 200, "{}", retried.json());
    assert_eq!(retried.header("idempotent-replayed"), Some("true"));
    assert_eq!(retried.json()["balance_after"], 700);
    assert_eq!(service.balance_and_debits(&user).await, (700, 1));
}
