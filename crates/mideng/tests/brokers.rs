#![cfg(all(feature = "rabbitmq", feature = "nats"))]
//! The RabbitMQ and NATS JetStream adapters against real brokers: RabbitMQ on
//! 127.0.0.1:5672 (guest/guest) and NATS with JetStream on 127.0.0.1:4222. The tests fail,
//! not skip, when a broker is down. Each test uses its own queue prefix or stream and subject
//! prefix, so that parallel runs do not see each other's messages, and deletes them at the end.

use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mideng::outbox::nats::{NatsPublisher, NatsSettings, NatsSubscriber};
use mideng::outbox::rabbitmq::{RabbitPublisher, RabbitSettings, RabbitSubscriber};
use mideng::outbox::{BrokerError, Delivery, Message, Publisher, Subscriber};

const TOPIC: &str = "payment.succeeded";
/// How long a test waits for a message it expects.
const WAIT: Duration = Duration::from_secs(2);
/// How long a test waits to be sure that no message comes.
const QUIET: Duration = Duration::from_millis(300);

/// A name no other test run uses.
fn unique(tag: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos();
    format!("{tag}_{}_{nanos}", std::process::id())
}

fn message(n: u32) -> Message {
    Message {
        id: format!("ob_{n}"),
        topic: TOPIC.to_owned(),
        key: format!("P{n}"),
        payload: format!("{{\"n\":{n}}}").into_bytes(),
    }
}

async fn expect_delivery(subscriber: &mut dyn Subscriber) -> Delivery {
    subscriber
        .next(WAIT)
        .await
        .expect("broker reachable")
        .expect("a delivery within the wait")
}

async fn expect_nothing(subscriber: &mut dyn Subscriber) {
    let delivery = subscriber.next(QUIET).await.expect("broker reachable");
    assert!(delivery.is_none(), "unexpected {delivery:?}");
}

/// Publishes messages 1 to 3, receives them intact, acks two, retries the third, gets it back
/// as redelivered, and finds the queue empty after the last ack.
async fn round_trip(publisher: &dyn Publisher, subscriber: &mut dyn Subscriber) {
    let sent: Vec<Message> = (1..=3).map(message).collect();
    for each in &sent {
        publisher.publish(each).await.expect("published");
    }
    let mut received = Vec::new();
    for _ in 0..3 {
        let delivery = expect_delivery(subscriber).await;
        assert!(!delivery.redelivered, "{delivery:?}");
        received.push(delivery);
    }
    let ids: Vec<&Message> = received.iter().map(|delivery| &delivery.message).collect();
    assert_eq!(ids, sent.iter().collect::<Vec<_>>());

    let retried = received.pop().expect("three deliveries");
    for delivery in received {
        delivery.ack().await.expect("acked");
    }
    retried
        .retry(Duration::from_millis(50))
        .await
        .expect("retried");
    let again = expect_delivery(subscriber).await;
    assert!(again.redelivered, "{again:?}");
    assert_eq!(again.message, sent[2]);
    again.ack().await.expect("acked");
    expect_nothing(subscriber).await;
}

fn rabbit_settings(prefix: &str) -> RabbitSettings {
    RabbitSettings {
        queue_prefix: prefix.to_owned(),
        confirm_timeout: Duration::from_secs(3),
        ..RabbitSettings::default()
    }
}

/// A plain lapin connection and channel, to act on queues behind the adapter's back.
async fn rabbit_channel() -> (lapin::Connection, lapin::Channel) {
    let url = RabbitSettings::default().url;
    let connection =
        lapin::Connection::connect(url.expose(), lapin::ConnectionProperties::default())
            .await
            .expect("RabbitMQ reachable on 127.0.0.1:5672");
    let channel = connection.create_channel().await.expect("channel");
    (connection, channel)
}

async fn delete_queue(channel: &lapin::Channel, queue: &str) {
    channel
        .queue_delete(queue.into(), lapin::options::QueueDeleteOptions::default())
        .await
        .expect("queue deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_delivers_acks_and_redelivers() {
    let prefix = unique("mideng_test");
    let publisher = RabbitPublisher::new(rabbit_settings(&prefix));
    let mut subscriber = RabbitSubscriber::new(rabbit_settings(&prefix), TOPIC);

    round_trip(&publisher, &mut subscriber).await;

    let (_connection, channel) = rabbit_channel().await;
    delete_queue(&channel, &format!("{prefix}.{TOPIC}")).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_unroutable_publish_is_refused() {
    let prefix = unique("mideng_test");
    let queue = format!("{prefix}.{TOPIC}");
    let publisher = RabbitPublisher::new(rabbit_settings(&prefix));
    publisher
        .publish(&message(1))
        .await
        .expect("first publish declares the queue");

    let (_connection, channel) = rabbit_channel().await;
    delete_queue(&channel, &queue).await;

    let refused = publisher.publish(&message(2)).await;
    let Err(BrokerError::Refused(reason)) = refused else {
        panic!("expected Refused, got {refused:?}");
    };
    assert!(reason.contains("unroutable"), "{reason}");
    // The refusal made the publisher forget the queue: the next publish declares it again.
    publisher
        .publish(&message(3))
        .await
        .expect("queue declared again");
    delete_queue(&channel, &queue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_unreachable_is_unavailable() {
    let settings = RabbitSettings {
        url: "amqp://mideng:hunter2@127.0.0.1:1/%2f".into(),
        ..rabbit_settings(&unique("mideng_test"))
    };
    let started = Instant::now();
    let publisher = RabbitPublisher::new(settings.clone());
    let failed = publisher.publish(&message(1)).await;
    let Err(BrokerError::Unavailable(reason)) = failed else {
        panic!("expected Unavailable, got {failed:?}");
    };
    assert!(!reason.contains("hunter2"), "{reason}");

    let mut subscriber = RabbitSubscriber::new(settings, TOPIC);
    let failed = subscriber.next(QUIET).await;
    assert!(
        matches!(failed, Err(BrokerError::Unavailable(_))),
        "{failed:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}

fn nats_settings() -> NatsSettings {
    NatsSettings {
        stream: unique("MIDENG_TEST"),
        subject_prefix: unique("mideng_test"),
        ack_timeout: Duration::from_secs(3),
        ..NatsSettings::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_delivers_dedups_and_redelivers() {
    let settings = nats_settings();
    let publisher = NatsPublisher::new(settings.clone());
    let mut subscriber = NatsSubscriber::new(settings.clone(), TOPIC, "workers");

    // The same id again inside the duplicate window is acknowledged but not stored.
    publisher.publish(&message(1)).await.expect("published");
    publisher
        .publish(&message(1))
        .await
        .expect("duplicate acknowledged");
    let client = async_nats::connect(settings.url.expose())
        .await
        .expect("NATS reachable on 127.0.0.1:4222");
    let jetstream = async_nats::jetstream::new(client);
    let mut stream = jetstream
        .get_stream(&settings.stream)
        .await
        .expect("stream created by the publisher");
    assert_eq!(stream.info().await.expect("stream info").state.messages, 1);

    // Message 1 again: still one stored copy, and the round trip sees it once.
    round_trip(&publisher, &mut subscriber).await;
    assert_eq!(stream.info().await.expect("stream info").state.messages, 3);

    jetstream
        .delete_stream(&settings.stream)
        .await
        .expect("stream deleted");
}

/// A durable consumer of one topic that a subscriber of another topic opens by the same name
/// (a configuration mistake, or a consumer recreated with another filter): the other topic's
/// message never reaches the subscriber's handler, and the rightful consumer still gets it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_never_hands_a_subscriber_another_topics_message() {
    let settings = nats_settings();
    let publisher = NatsPublisher::new(settings.clone());
    let mut payments = NatsSubscriber::new(settings.clone(), TOPIC, "shared");
    let mut rightful = NatsSubscriber::new(settings.clone(), TOPIC, "payments");
    // Both consumers exist (filtered on TOPIC) before the message is stored.
    expect_nothing(&mut payments).await;
    expect_nothing(&mut rightful).await;
    publisher.publish(&message(7)).await.expect("published");

    // The same durable name, asked for by a subscriber of refunds: the server hands it the
    // consumer filtered on payments.
    let mut refunds = NatsSubscriber::new(settings.clone(), "refund.succeeded", "shared");
    match refunds.next(WAIT).await {
        Err(BrokerError::Malformed(detail)) => {
            assert!(detail.contains("ob_7"), "{detail}");
        }
        other => panic!("expected the message refused as another topic's, got {other:?}"),
    }
    expect_nothing(&mut refunds).await;
    // Terminated for that consumer only: the payments consumer of another name has its copy.
    let delivery = expect_delivery(&mut rightful).await;
    assert_eq!(delivery.message, message(7));
    delivery.ack().await.expect("acked");

    let client = async_nats::connect(settings.url.expose())
        .await
        .expect("NATS reachable on 127.0.0.1:4222");
    async_nats::jetstream::new(client)
        .delete_stream(&settings.stream)
        .await
        .expect("stream deleted");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_unreachable_is_unavailable() {
    let settings = NatsSettings {
        url: "nats://127.0.0.1:1".into(),
        ..nats_settings()
    };
    let started = Instant::now();
    let publisher = NatsPublisher::new(settings.clone());
    let failed = publisher.publish(&message(1)).await;
    assert!(
        matches!(failed, Err(BrokerError::Unavailable(_))),
        "{failed:?}"
    );
    let mut subscriber = NatsSubscriber::new(settings, TOPIC, "workers");
    let failed = subscriber.next(QUIET).await;
    assert!(
        matches!(failed, Err(BrokerError::Unavailable(_))),
        "{failed:?}"
    );
    assert!(
        started.elapsed() < Duration::from_secs(6),
        "{:?}",
        started.elapsed()
    );
}
