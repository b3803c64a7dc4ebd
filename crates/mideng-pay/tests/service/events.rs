//! The consistency layer end to end: the success flow writes `payment.succeeded` into the
//! outbox, a relay publishes it, the consumer grants the order's entitlement — once, whatever
//! is delivered twice, killed halfway or cut off for a while. On the in-database queue for every
//! backend, on RabbitMQ and NATS JetStream with PostgreSQL.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use async_trait::async_trait;
use mideng::outbox::nats::NatsSettings;
use mideng::outbox::rabbitmq::RabbitSettings;
use mideng::outbox::sql::RelaySettings;
use mideng::outbox::{BrokerError, Message, Publisher};
use mideng_pay::domain::events::{GRANT_KIND, GrantedItem, PAYMENT_SUCCEEDED, PaymentSucceeded};
use mideng_pay::flows::PaymentSettings;
use mideng_pay::store::GrantOutcome;
use mideng_pay::testing::Proxy;
use mideng_pay::workers::consumer::{self, Handled};
use mideng_pay::workers::{Broker, ConsumerSettings, EventSettings, RelayWorkerSettings};
use serde_json::json;

use crate::harness::{Backend, Service, WAIT_LIMIT, isolated_postgres, race, unique};

fn number_of(answer: &crate::harness::Answer) -> String {
    answer.json()["payment_no"]
        .as_str()
        .unwrap_or_else(|| panic!("no payment number: {}", answer.json()))
        .to_owned()
}

/// Creates an order for `user` (with the harness's entitlement), pays it at the channel and
/// waits until the notify is settled; the payment number.
async fn paid_order(service: &Service, user: &str) -> String {
    let order_id = unique("o");
    service.create_order(&order_id, user, 990).await;
    let payment_no = number_of(&service.create_payment(&order_id, "alipay").await);
    assert_eq!(service.pay_at_channel(&payment_no).await["outcome"], "paid");
    service.settled_trade(&payment_no).await;
    payment_no
}

/// Waits until the deployment's events are relayed and consumed. Only a SQLite deployment has
/// an outbox and a queue of its own; on the shared servers other tests' rows come and go (and
/// ended deployments leave messages that no consumer takes any more), so there the workers get
/// a moment instead.
async fn drained(service: &Service) {
    let started = Instant::now();
    if service.backend == Backend::Sqlite {
        while service
            .state
            .ports
            .store
            .events
            .outbox_backlog()
            .await
            .expect("backlog")
            .unsent
            > 0
        {
            assert!(started.elapsed() < WAIT_LIMIT, "the outbox never drained");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        while service
            .state
            .ports
            .store
            .events
            .queue_depth(PAYMENT_SUCCEEDED)
            .await
            .expect("depth")
            > 0
        {
            assert!(started.elapsed() < WAIT_LIMIT, "the queue never drained");
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    } else {
        // The shared queue also holds messages of ended deployments that had no consumer left.
        tokio::time::sleep(Duration::from_millis(1500)).await;
    }
}

pub(crate) async fn a_paid_order_is_granted_once(backend: Backend) {
    let service = Service::start(backend).await;
    let user = unique("u");
    let payment_no = paid_order(&service, &user).await;
    let grants = service.settled_grants(&user, 1).await;
    assert_eq!(
        (
            grants[0]["payment_no"].as_str(),
            grants[0]["sku"].as_str(),
            grants[0]["quantity"].as_i64()
        ),
        (Some(payment_no.as_str()), Some("vip-month"), Some(1))
    );

    // The same event again: redelivered five times through the queue under new message ids
    // (a relay that died before marking its row sent, a broker that lost its dedup window),
    // and handed to eight consumers at once.
    let order = service
        .get(&format!("/v1/payments/{payment_no}"))
        .await
        .json();
    let event = PaymentSucceeded {
        tenant_id: service.tenant.clone(),
        payment_no: payment_no.clone(),
        order_id: order["order_id"].as_str().expect("order").to_owned(),
        user_id: user.clone(),
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
    };
    let payload = serde_json::to_vec(&event).expect("json");
    let queue = service.state.ports.store.events.queue();
    for _ in 0..5 {
        queue
            .publish(&Message {
                id: unique("evt"),
                topic: PAYMENT_SUCCEEDED.to_owned(),
                key: payment_no.clone(),
                payload: payload.clone(),
            })
            .await
            .expect("published");
    }
    let store = service.state.ports.store.clone();
    let outcomes = race(8, |_| {
        let store = store.clone();
        let event = event.clone();
        async move { store.grants.grant(&event, true).await.expect("grant") }
    })
    .await;
    assert!(
        outcomes
            .iter()
            .all(|outcome| matches!(outcome, GrantOutcome::Duplicate | GrantOutcome::Busy)),
        "{outcomes:?}"
    );
    drained(&service).await;
    assert_eq!(service.settled_grants(&user, 1).await.len(), 1);

    // An order without an entitlement is paid and grants nothing.
    let plain_user = unique("u");
    let order_id = unique("o");
    let created = service
        .post(
            "/v1/orders",
            json!({"order_id": order_id, "user_id": plain_user, "amount": 100, "currency": "CNY"}),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.json());
    let plain = number_of(&service.create_payment(&order_id, "wechat").await);
    assert_eq!(service.pay_at_channel(&plain).await["outcome"], "paid");
    service.settled_trade(&plain).await;
    drained(&service).await;
    assert!(service.grants(&plain_user).await.is_empty());
    // A bad query is the client's mistake.
    let bad = service.get("/v1/entitlements").await;
    assert_eq!((bad.status, bad.code().as_str()), (400, "invalid-query"));
}

/// A deployment with the workers the test chooses, on a database of its own.
async fn isolated(events: EventSettings) -> Service {
    Service::start_on(
        Backend::Postgres,
        isolated_postgres().await,
        None,
        None,
        PaymentSettings::default(),
        events,
    )
    .await
}

fn rabbit(url_port: u16) -> Broker {
    Broker::RabbitMq(RabbitSettings {
        url: format!("amqp://guest:guest@127.0.0.1:{url_port}/%2f").into(),
        queue_prefix: unique("mideng-test"),
        ..RabbitSettings::default()
    })
}

fn nats(url_port: u16) -> Broker {
    let suffix = unique("t").replace('-', "_");
    Broker::Nats(NatsSettings {
        url: format!("nats://127.0.0.1:{url_port}").into(),
        stream: format!("MIDENG_TEST_{suffix}"),
        subject_prefix: format!("mideng_test_{suffix}"),
        ..NatsSettings::default()
    })
}

/// Publishes through `inner`, then hangs forever: a relay killed after the broker confirmed and
/// before it marked the row sent.
#[derive(Debug)]
struct DiesAfterPublish {
    inner: Arc<dyn Publisher>,
    published: Arc<tokio::sync::Notify>,
}

#[async_trait]
impl Publisher for DiesAfterPublish {
    fn name(&self) -> &'static str {
        "dies-after-publish"
    }

    async fn publish(&self, message: &Message) -> Result<(), BrokerError> {
        self.inner.publish(message).await?;
        self.published.notify_one();
        std::future::pending().await
    }
}

/// Counts what it publishes through `inner`.
#[derive(Debug)]
struct Counting {
    inner: Arc<dyn Publisher>,
    count: Arc<AtomicUsize>,
}

#[async_trait]
impl Publisher for Counting {
    fn name(&self) -> &'static str {
        "counting"
    }

    async fn publish(&self, message: &Message) -> Result<(), BrokerError> {
        self.inner.publish(message).await?;
        self.count.fetch_add(1, Ordering::SeqCst);
        Ok(())
    }
}

fn short_claims() -> RelaySettings {
    RelaySettings {
        batch: 10,
        claim_lease: Duration::from_secs(2),
        publish_timeout: Duration::from_secs(1),
        retry_cap: Duration::from_secs(1),
        ..RelaySettings::default()
    }
}

/// Takes deliveries from `broker` and handles them like the consumer worker, until `count`
/// have been handled; their outcomes.
async fn consume(service: &Service, broker: &Broker, count: usize) -> Vec<Handled> {
    let settings = ConsumerSettings {
        group: unique("group"),
        ..ConsumerSettings::default()
    };
    let store = service.state.ports.store.clone();
    let mut subscriber = broker
        .subscriber(store.events.as_ref(), PAYMENT_SUCCEEDED, &settings)
        .expect("subscriber");
    let started = Instant::now();
    let mut handled = Vec::new();
    while handled.len() < count {
        assert!(started.elapsed() < WAIT_LIMIT, "only {handled:?} delivered");
        if let Ok(Some(delivery)) = subscriber.next(Duration::from_millis(500)).await {
            let ports = consumer::ConsumerPorts {
                grants: store.grants.clone(),
                failures: store.event_failures.clone(),
            };
            handled.push(consumer::handle(&ports, GRANT_KIND, delivery, &settings).await);
        }
    }
    handled
}

pub(crate) async fn a_relay_killed_after_publishing_grants_once(
    broker: fn(u16) -> Broker,
    port: u16,
) {
    let broker = broker(port);
    let service = isolated(EventSettings {
        broker: broker.clone(),
        relay: None,
        consumer: None,
        webhooks: None,
    })
    .await;
    let user = unique("u");
    paid_order(&service, &user).await;
    let store = service.state.ports.store.clone();
    assert_eq!(
        store.events.outbox_backlog().await.expect("backlog").unsent,
        1
    );

    // The relay publishes, the broker confirms, and the relay dies before marking the row sent.
    let published = Arc::new(tokio::sync::Notify::new());
    let dying = store
        .events
        .relay(
            Arc::new(DiesAfterPublish {
                inner: broker.publisher(store.events.as_ref()),
                published: published.clone(),
            }),
            short_claims(),
        )
        .expect("relay");
    let killed = tokio::spawn(async move { dying.run_once().await });
    tokio::time::timeout(WAIT_LIMIT, published.notified())
        .await
        .expect("published");
    killed.abort();

    // Its claim holds the row: a second relay publishes nothing now (no double publish in the
    // normal path) …
    let count = Arc::new(AtomicUsize::new(0));
    let next = store
        .events
        .relay(
            Arc::new(Counting {
                inner: broker.publisher(store.events.as_ref()),
                count: count.clone(),
            }),
            short_claims(),
        )
        .expect("relay");
    assert_eq!(next.run_once().await.expect("round").claimed, 0);
    // … and after the claim runs out, it publishes the row again and marks it sent.
    let started = Instant::now();
    while count.load(Ordering::SeqCst) == 0 {
        assert!(started.elapsed() < WAIT_LIMIT, "never republished");
        tokio::time::sleep(Duration::from_millis(200)).await;
        next.run_once().await.expect("round");
    }
    assert_eq!(
        store.events.outbox_backlog().await.expect("backlog").unsent,
        0
    );

    if matches!(broker, Broker::Nats(_) | Broker::Queue) {
        // JetStream drops the second publish of one `Nats-Msg-Id` inside its dedup window, and
        // the in-database queue one of an id still queued: one delivery, one grant.
        let handled = consume(&service, &broker, 1).await;
        assert_eq!(handled, [Handled::Processed(GrantOutcome::Granted)]);
    } else {
        // Two deliveries of one event: one grant, one duplicate caught by the dedup table.
        let handled = consume(&service, &broker, 2).await;
        assert_eq!(
            handled,
            [
                Handled::Processed(GrantOutcome::Granted),
                Handled::Processed(GrantOutcome::Duplicate)
            ]
        );
    }
    assert_eq!(service.settled_grants(&user, 1).await.len(), 1);
}

pub(crate) async fn a_broker_outage_loses_nothing(broker: fn(u16) -> Broker, port: u16) {
    let proxy = Proxy::start(&format!("127.0.0.1:{port}"))
        .await
        .expect("bind");
    let broker = broker(proxy.port());
    let service = isolated(EventSettings {
        broker,
        relay: Some(RelayWorkerSettings {
            relay: short_claims(),
            interval: Duration::from_millis(100),
        }),
        consumer: Some(ConsumerSettings {
            group: unique("group"),
            ..ConsumerSettings::default()
        }),
        webhooks: None,
    })
    .await;
    let user = unique("u");
    paid_order(&service, &user).await;
    service.settled_grants(&user, 1).await;

    // The broker goes away; orders keep being paid.
    proxy.cut();
    let mut payments = Vec::new();
    for _ in 0..6 {
        payments.push(paid_order(&service, &user).await);
    }
    tokio::time::sleep(Duration::from_secs(1)).await;
    let backlog = service
        .state
        .ports
        .store
        .events
        .outbox_backlog()
        .await
        .expect("backlog");
    assert_eq!(backlog.unsent, 6, "events wait in the outbox: {backlog:?}");
    assert_eq!(service.grants(&user).await.len(), 1);

    // It comes back: every event is delivered, each grant made once.
    proxy.restore();
    let grants = service.settled_grants(&user, 7).await;
    for payment_no in &payments {
        assert_eq!(
            grants
                .iter()
                .filter(|grant| grant["payment_no"] == payment_no.as_str())
                .count(),
            1
        );
    }
    assert_eq!(
        service
            .state
            .ports
            .store
            .events
            .outbox_backlog()
            .await
            .expect("backlog")
            .unsent,
        0
    );
}

pub(crate) async fn two_relays_and_two_consumers_one_effect_each(
    broker: fn(u16) -> Broker,
    port: u16,
) {
    let broker = broker(port);
    let service = isolated(EventSettings {
        broker: broker.clone(),
        relay: None,
        consumer: None,
        webhooks: None,
    })
    .await;
    let user = unique("u");
    for _ in 0..12 {
        paid_order(&service, &user).await;
    }
    let store = service.state.ports.store.clone();
    let count = Arc::new(AtomicUsize::new(0));
    let relays: Vec<_> = (0..2)
        .map(|_| {
            store
                .events
                .relay(
                    Arc::new(Counting {
                        inner: broker.publisher(store.events.as_ref()),
                        count: count.clone(),
                    }),
                    RelaySettings {
                        batch: 3,
                        ..RelaySettings::default()
                    },
                )
                .expect("relay")
        })
        .collect();
    let rounds = relays.into_iter().map(|relay| {
        tokio::spawn(async move {
            let mut sent = 0;
            loop {
                let round = relay.run_once().await.expect("round");
                sent += round.sent;
                if round.claimed == 0 {
                    return sent;
                }
            }
        })
    });
    let mut sent = Vec::new();
    for round in rounds {
        sent.push(round.await.expect("relay"));
    }
    assert_eq!(sent.iter().sum::<u32>(), 12, "{sent:?}");
    assert_eq!(count.load(Ordering::SeqCst), 12, "no row published twice");

    // Two consumers of one group share the deliveries; twelve grants, each once.
    let settings = ConsumerSettings {
        group: unique("group"),
        ..ConsumerSettings::default()
    };
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let workers: Vec<_> = (0..2)
        .map(|_| {
            let subscriber = broker
                .subscriber(store.events.as_ref(), PAYMENT_SUCCEEDED, &settings)
                .expect("subscriber");
            tokio::spawn(consumer::run(
                consumer::ConsumerPorts {
                    grants: store.grants.clone(),
                    failures: store.event_failures.clone(),
                },
                subscriber,
                settings.clone(),
                stopped.clone(),
            ))
        })
        .collect();
    let grants = service.settled_grants(&user, 12).await;
    let mut payments: Vec<&str> = grants
        .iter()
        .map(|grant| grant["payment_no"].as_str().unwrap_or_default())
        .collect();
    payments.sort_unstable();
    payments.dedup();
    assert_eq!(payments.len(), 12);
    stop.send_replace(true);
    for worker in workers {
        worker.await.expect("consumer");
    }
}

pub(crate) const RABBIT_PORT: u16 = 5672;
pub(crate) const NATS_PORT: u16 = 4222;
pub(crate) type BrokerOn = fn(u16) -> Broker;
pub(crate) const RABBIT: BrokerOn = rabbit;
pub(crate) const NATS: BrokerOn = nats;
pub(crate) const QUEUE: BrokerOn = |_| Broker::Queue;
