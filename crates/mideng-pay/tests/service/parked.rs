//! Events a consumer cannot process: counted with a growing pause, parked after the configured
//! number of failures (at once when unreadable) and acknowledged, then replayed or discarded by
//! an operator with a reason; a replay of an event applied meanwhile grants nothing twice.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use async_trait::async_trait;
use mideng::StoreError;
use mideng::outbox::{Acker, BrokerError, Delivery, Message};
use mideng_pay::domain::events::Grant;
use mideng_pay::domain::events::{GRANT_KIND, GrantedItem, PAYMENT_SUCCEEDED, PaymentSucceeded};
use mideng_pay::flows::grant::{self, Replayed};
use mideng_pay::store::RevokeOutcome;
use mideng_pay::store::{FailureStatus, GrantOutcome, Grants};
use mideng_pay::workers::ConsumerSettings;
use mideng_pay::workers::consumer::{self, ConsumerPorts, Handled};

use mideng_pay::api::api_key_hash;
use mideng_pay::web::journal::Journal;
use mideng_pay::web::{ConsoleSettings, PageSettings};
use serde_json::{Value, json};

use crate::harness::{Backend, Service, queue_events, unique};

const CONSOLE_KEY: &str = "console-key-for-the-parked-tests";

/// A console call with the console key: status and JSON answer.
async fn console(
    service: &Service,
    method: reqwest::Method,
    path: &str,
    body: Option<Value>,
) -> (u16, Value) {
    let mut request = service
        .client
        .request(method, format!("{}{path}", service.base))
        .bearer_auth(CONSOLE_KEY);
    if let Some(body) = body {
        request = request.json(&body);
    }
    let response = request.send().await.expect("answer");
    let status = response.status().as_u16();
    (status, response.json().await.unwrap_or(Value::Null))
}

/// The real grants, failing their first `failures` grants as a database outage would.
struct Flaky {
    inner: Arc<dyn Grants>,
    failures: AtomicUsize,
}

#[async_trait]
impl Grants for Flaky {
    async fn grant(
        &self,
        event: &PaymentSucceeded,
        dedup: bool,
    ) -> Result<GrantOutcome, StoreError> {
        let left = self.failures.load(Ordering::Acquire);
        if left > 0 {
            self.failures.store(left - 1, Ordering::Release);
            return Err(StoreError::Unavailable("injected outage".to_owned()));
        }
        self.inner.grant(event, dedup).await
    }

    async fn grants(&self, tenant_id: &str, user_id: &str) -> Result<Vec<Grant>, StoreError> {
        self.inner.grants(tenant_id, user_id).await
    }

    async fn revoke(
        &self,
        event: &mideng_pay::domain::events::RefundSucceeded,
    ) -> Result<RevokeOutcome, StoreError> {
        self.inner.revoke(event).await
    }
}

/// What the consumer told the broker about each delivery.
#[derive(Clone, Default)]
struct Settled(Arc<Mutex<Vec<String>>>);

struct Recorder(Settled);

#[async_trait]
impl Acker for Recorder {
    async fn ack(self: Box<Self>) -> Result<(), BrokerError> {
        self.0.0.lock().expect("lock").push("ack".to_owned());
        Ok(())
    }

    async fn retry(self: Box<Self>, after: Duration) -> Result<(), BrokerError> {
        self.0
            .0
            .lock()
            .expect("lock")
            .push(format!("retry {}ms", after.as_millis()));
        Ok(())
    }
}

fn event(service: &Service, user: &str) -> PaymentSucceeded {
    PaymentSucceeded {
        tenant_id: service.tenant.clone(),
        payment_no: unique("P"),
        order_id: unique("o"),
        user_id: user.to_owned(),
        amount: 990,
        currency: "CNY".to_owned(),
        channel: "alipay".to_owned(),
        channel_trade_no: "T".to_owned(),
        paid_at_ms: 0,
        order_paid: true,
        entitlement: Some(GrantedItem {
            sku: "vip-month".to_owned(),
            quantity: 1,
        }),
    }
}

fn delivery(message: &Message, settled: &Settled) -> Delivery {
    Delivery::new(message.clone(), true, Box::new(Recorder(settled.clone())))
}

fn message(payload: Vec<u8>) -> Message {
    Message {
        id: unique("evt_"),
        topic: PAYMENT_SUCCEEDED.to_owned(),
        key: "P".to_owned(),
        payload,
    }
}

pub(crate) async fn a_failing_event_is_parked_and_replayed_once(backend: Backend) {
    let service = Service::start_with_pages(
        backend,
        backend.database_url(),
        None,
        None,
        Default::default(),
        queue_events(),
        |_, _, _| PageSettings {
            checkout: None,
            console: Some(ConsoleSettings {
                api_key_sha256: api_key_hash(CONSOLE_KEY),
                journal: Journal::new(0),
            }),
        },
    )
    .await;
    let store = service.state.ports.store.clone();
    let flaky = Arc::new(Flaky {
        inner: store.grants.clone(),
        failures: AtomicUsize::new(3),
    });
    let ports = ConsumerPorts {
        grants: flaky.clone(),
        failures: store.event_failures.clone(),
    };
    let settings = ConsumerSettings {
        park_after: 3,
        retry_after: Duration::from_millis(100),
        retry_cap: Duration::from_millis(300),
        ..ConsumerSettings::default()
    };
    let user = unique("u");
    let paid = event(&service, &user);
    let parked = message(serde_json::to_vec(&paid).expect("json"));
    let settled = Settled::default();

    // Three failed deliveries: two asked again after a doubling pause, the third parked and
    // acknowledged, so that the broker stops sending it.
    let mut handled = Vec::new();
    for _ in 0..3 {
        handled.push(
            consumer::handle(&ports, GRANT_KIND, delivery(&parked, &settled), &settings).await,
        );
    }
    assert_eq!(
        handled,
        [Handled::Retried, Handled::Retried, Handled::Parked]
    );
    assert_eq!(
        *settled.0.lock().expect("lock"),
        ["retry 100ms", "retry 200ms", "ack"]
    );
    let kept = store
        .event_failures
        .failed_event(&parked.id)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!((kept.status, kept.attempts), (FailureStatus::Parked, 3));
    assert!(kept.last_error.contains("injected outage"), "{kept:?}");
    assert!(
        service.grants(&user).await.is_empty(),
        "nothing granted yet"
    );
    // A copy delivered again (the ack was lost) stays parked and is acknowledged.
    assert_eq!(
        consumer::handle(&ports, GRANT_KIND, delivery(&parked, &settled), &settings).await,
        Handled::Parked
    );

    // An unreadable payload is parked at the first delivery.
    let garbage = message(b"{not json".to_vec());
    assert_eq!(
        consumer::handle(&ports, GRANT_KIND, delivery(&garbage, &settled), &settings).await,
        Handled::Parked
    );

    // A failure then a success: the count goes, nothing is parked.
    flaky.failures.store(1, Ordering::Release);
    let recovered_event = event(&service, &user);
    let recovered = message(serde_json::to_vec(&recovered_event).expect("json"));
    assert_eq!(
        consumer::handle(
            &ports,
            GRANT_KIND,
            delivery(&recovered, &settled),
            &settings
        )
        .await,
        Handled::Retried
    );
    assert_eq!(
        consumer::handle(
            &ports,
            GRANT_KIND,
            delivery(&recovered, &settled),
            &settings
        )
        .await,
        Handled::Processed(GrantOutcome::Granted)
    );
    assert!(
        store
            .event_failures
            .failed_event(&recovered.id)
            .await
            .expect("read")
            .is_none()
    );
    let parked_now = store.event_failures.parked(1_000).await.expect("parked");
    assert!(parked_now.iter().any(|event| event.message_id == parked.id));
    assert!(
        parked_now
            .iter()
            .any(|event| event.message_id == garbage.id)
    );
    assert!(
        !parked_now
            .iter()
            .any(|event| event.message_id == recovered.id)
    );

    // The operator replays it: granted once; a second replay finds nothing parked.
    let real = ConsumerPorts {
        grants: store.grants.clone(),
        failures: store.event_failures.clone(),
    };
    assert_eq!(
        grant::replay(
            &service.state.ports,
            &parked.id,
            "database back",
            settings.dedup
        )
        .await
        .expect("replayed"),
        Replayed::Processed
    );
    assert_eq!(
        grant::replay(&service.state.ports, &parked.id, "again", settings.dedup)
            .await
            .expect("answered"),
        Replayed::NotParked
    );
    let grants = service.grants(&user).await;
    let of_paid = grants
        .iter()
        .filter(|grant| grant["payment_no"] == paid.payment_no.as_str())
        .count();
    assert_eq!(of_paid, 1, "{grants:#?}");
    let replayed = store
        .event_failures
        .failed_event(&parked.id)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(replayed.status, FailureStatus::Replayed);
    assert_eq!(
        replayed.resolution.as_deref(),
        Some("replayed: database back")
    );
    // The broker's late copy of the replayed event is a duplicate: still one grant.
    assert_eq!(
        consumer::handle(&real, GRANT_KIND, delivery(&parked, &settled), &settings).await,
        Handled::Processed(GrantOutcome::Duplicate)
    );

    // The unreadable one fails its replay again, stays parked, and is discarded.
    assert_eq!(
        grant::replay(&service.state.ports, &garbage.id, "try", settings.dedup)
            .await
            .expect("answered"),
        Replayed::FailedAgain
    );
    // The console lists it and discards it, with the operator's reason; once.
    let overview = console(&service, reqwest::Method::GET, "/console/overview", None).await;
    assert_eq!(overview.0, 200);
    assert!(
        overview.1["parked_events"]
            .as_array()
            .is_some_and(|events| events
                .iter()
                .any(|event| event["message_id"] == garbage.id.as_str())),
        "{}",
        overview.1
    );
    let act = |id: &str, reason: &str| json!({"message_id": id, "reason": reason});
    let (status, view) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/discard",
        Some(act(&garbage.id, "not ours")),
    )
    .await;
    assert_eq!(
        (status, view["status"].as_str()),
        (200, Some("DISCARDED")),
        "{view}"
    );
    let (status, _) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/discard",
        Some(act(&garbage.id, "twice")),
    )
    .await;
    assert_eq!(status, 409, "discarded once");
    let (status, _) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/replay",
        Some(act(&garbage.id, "")),
    )
    .await;
    assert_eq!(status, 422, "a reason is required");
    let (status, _) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/replay",
        Some(act("evt_nobody", "x")),
    )
    .await;
    assert_eq!(status, 404);
    // A discarded event's late copy is acknowledged without its effect.
    assert_eq!(
        consumer::handle(&real, GRANT_KIND, delivery(&garbage, &settled), &settings).await,
        Handled::Parked
    );
    let discarded = store
        .event_failures
        .failed_event(&garbage.id)
        .await
        .expect("read")
        .expect("kept");
    assert_eq!(discarded.status, FailureStatus::Discarded);
}

/// Outbox rows the broker refuses: parked by the relay (its NATS publisher refuses a topic
/// that is no valid NATS subject, before anything reaches the server), listed on the console beside the consumer's parked events,
/// discarded or replayed there with a reason; a replayed row is tried again and, refused
/// again, parked again. On SQLite: a database of the test's own, whose outbox no other relay
/// drains (the service's own relay is off).
pub(crate) async fn refused_outbox_rows_are_parked_and_settled_on_the_console() {
    use mideng::outbox::nats::{NatsPublisher, NatsSettings};
    use mideng::outbox::sql::{RelaySettings, enqueue_in};
    use mideng::store::sql::sqlite::{SqliteDialect, SqliteStore};

    let service = Service::start_with_pages(
        Backend::Sqlite,
        Backend::Sqlite.database_url(),
        None,
        None,
        Default::default(),
        mideng_pay::workers::EventSettings {
            relay: None,
            ..queue_events()
        },
        |_, _, _| PageSettings {
            checkout: None,
            console: Some(ConsoleSettings {
                api_key_sha256: api_key_hash(CONSOLE_KEY),
                journal: Journal::new(0),
            }),
        },
    )
    .await;
    // Two rows no broker takes, written as a business transaction writes its events.
    let writer = SqliteStore::connect(&service.database_url, Default::default())
        .await
        .expect("the service's database");
    let mut transaction = writer.begin_write().await.expect("begin");
    let mut poison = Vec::new();
    for key in ["P1", "P2"] {
        poison.push(
            enqueue_in::<SqliteDialect>(&mut transaction, "poison..row", key, b"{}")
                .await
                .expect("enqueue"),
        );
    }
    transaction.commit().await.expect("commit");

    // Nothing reaches the server (every row is refused first): one name for every run.
    let stream = "MIDENG_TEST_PARKED_OUTBOX".to_owned();
    let relay = service
        .state
        .ports
        .store
        .events
        .relay(
            Arc::new(NatsPublisher::new(NatsSettings {
                stream: stream.clone(),
                subject_prefix: stream.to_lowercase(),
                ..NatsSettings::default()
            })),
            RelaySettings {
                park_after_refusals: 1,
                ..RelaySettings::default()
            },
        )
        .expect("relay");
    let parked_now = || async {
        let (status, overview) =
            console(&service, reqwest::Method::GET, "/console/overview", None).await;
        assert_eq!(status, 200, "{overview}");
        overview["parked_events"]
            .as_array()
            .cloned()
            .unwrap_or_default()
            .into_iter()
            .filter(|event| event["consumer"] == "outbox.relay")
            .collect::<Vec<_>>()
    };
    let round = relay.run_once().await.expect("round");
    assert_eq!((round.claimed, round.parked), (2, 2), "{round:?}");
    let shown = parked_now().await;
    assert_eq!(shown.len(), 2, "{shown:?}");
    assert!(
        shown
            .iter()
            .all(|event| event["status"] == "PARKED" && event["topic"] == "poison..row"),
        "{shown:?}"
    );
    assert_eq!(relay.run_once().await.expect("round").claimed, 0);

    let act = |id: &str, reason: &str| json!({"message_id": id, "reason": reason});
    let (status, view) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/discard",
        Some(act(&poison[0], "a topic nobody consumes")),
    )
    .await;
    assert_eq!(
        (status, view["status"].as_str(), view["resolution"].as_str()),
        (
            200,
            Some("DISCARDED"),
            Some("discarded: a topic nobody consumes")
        ),
        "{view}"
    );
    let (status, _) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/discard",
        Some(act(&poison[0], "twice")),
    )
    .await;
    assert_eq!(status, 404, "discarded once: no longer parked");

    let (status, view) = console(
        &service,
        reqwest::Method::POST,
        "/console/events/replay",
        Some(act(&poison[1], "stream fixed")),
    )
    .await;
    assert_eq!(
        (status, view["status"].as_str()),
        (200, Some("REPLAYED")),
        "{view}"
    );
    assert!(parked_now().await.is_empty());
    let round = relay.run_once().await.expect("round");
    assert_eq!(
        (round.claimed, round.parked),
        (1, 1),
        "the replayed row is tried again and parked again; the discarded one is not: {round:?}"
    );
    let shown = parked_now().await;
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0]["message_id"], poison[1].as_str());
}
