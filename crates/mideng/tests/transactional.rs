//! The transactional forms of the SQL stores: a record commits or rolls back with the business
//! write it guards, and a concurrent request on the same key waits for that outcome.

mod support;

use std::time::Duration;

use mideng::store::sql::{Arg, Claim, Dialect, Once, PerDialect, SqlConn, SqlRow, SqlStore};
use mideng::{
    Decision, Fingerprint, IdempotencyKey, RecordPolicy, RecordStore, Scope, StoredResponse,
};
use mideng::{StoreError, dialect_sql};
use support::unique;

fn policy() -> RecordPolicy {
    RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(3600)).expect("policy")
}

fn answer() -> StoredResponse {
    StoredResponse {
        status: 200,
        headers: vec![],
        body: b"{\"debited\":100}".to_vec(),
    }
}

async fn record_commits_and_rolls_back_with_the_business_write<D: Dialect>(store: SqlStore<D>) {
    let scope = Scope::new(&unique("tenant"), "wallet.deduct").expect("scope");
    let fingerprint = Fingerprint::of_parts(&[b"deduct 100"]);

    // Rolled back: no record is left, so the retry proceeds as a first arrival.
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let mut transaction = store.begin_write().await.expect("begin");
    let decision = store
        .begin_in(&mut transaction, &scope, &key, &fingerprint, &policy())
        .await
        .expect("begin_in");
    assert!(matches!(decision, Decision::Proceed(_)));
    transaction.rollback().await.expect("rollback");
    assert!(
        store
            .find_record(&scope, &key)
            .await
            .expect("find")
            .is_none(),
        "no record without its effect"
    );

    // Committed with a response: the next arrival replays it.
    let mut transaction = store.begin_write().await.expect("begin");
    let Decision::Proceed(lease) = store
        .begin_in(&mut transaction, &scope, &key, &fingerprint, &policy())
        .await
        .expect("begin_in")
    else {
        panic!("proceeds after the rollback");
    };
    assert_eq!(lease.fence, 1);
    store
        .complete_in(&mut transaction, &lease, &answer())
        .await
        .expect("complete_in");
    transaction.commit().await.expect("commit");
    let replay = store
        .begin(&scope, &key, &fingerprint, &policy())
        .await
        .expect("begin");
    assert_eq!(replay, Decision::Replay(answer()));
}

async fn a_concurrent_begin_waits_for_the_open_transaction<D: Dialect>(store: SqlStore<D>) {
    let scope = Scope::new(&unique("tenant"), "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let fingerprint = Fingerprint::of_parts(&[b"deduct 100"]);

    let mut transaction = store.begin_write().await.expect("begin");
    let Decision::Proceed(lease) = store
        .begin_in(&mut transaction, &scope, &key, &fingerprint, &policy())
        .await
        .expect("begin_in")
    else {
        panic!("first arrival proceeds");
    };
    let second = {
        let (store, scope, key) = (store.clone(), scope.clone(), key.clone());
        tokio::spawn(async move { store.begin(&scope, &key, &fingerprint, &policy()).await })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !second.is_finished(),
        "the second arrival waits on the open transaction"
    );
    store
        .complete_in(&mut transaction, &lease, &answer())
        .await
        .expect("complete_in");
    transaction.commit().await.expect("commit");
    let decision = second.await.expect("task ran").expect("begin");
    assert_eq!(
        decision,
        Decision::Replay(answer()),
        "and then replays the committed outcome"
    );
}

/// The business table of the `write_once` tests: one row per effect, tagged with its key.
const EFFECTS_CREATE: &str = "CREATE TABLE IF NOT EXISTS mideng_test_effects (effect_id VARCHAR(120) PRIMARY KEY, tag VARCHAR(120) NOT NULL)";
const EFFECT_INSERT: PerDialect<&str> =
    dialect_sql!("INSERT INTO mideng_test_effects (effect_id, tag) VALUES (" ? ", " ? ")");
const EFFECTS_COUNT: PerDialect<&str> =
    dialect_sql!("SELECT COUNT(*) FROM mideng_test_effects WHERE tag = "?);

async fn effects<D: Dialect>(store: &SqlStore<D>, tag: &str) -> i64 {
    let mut connection = store.pool().acquire().await.expect("connection");
    connection
        .row(EFFECTS_COUNT.get::<D>(), &[Arg::Text(tag)])
        .await
        .expect("count")
        .expect("a row")
        .int(0)
        .expect("a count")
}

/// Many tasks, one key: `write_once` runs the effect once, and every other task gets the answer
/// stored with it; a failed effect leaves neither a record nor an effect, so the retry runs; the
/// key reused for another request runs nothing.
async fn write_once_runs_the_effect_once_with_its_answer<D: Dialect>(store: SqlStore<D>) {
    {
        let mut connection = store.pool().acquire().await.expect("connection");
        connection.run(EFFECTS_CREATE, &[]).await.expect("table");
    }
    let scope = Scope::new(&unique("tenant"), "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let fingerprint = Fingerprint::of_parts(&[b"deduct 100"]);
    let tag = format!("{}/{}", scope.tenant(), key.as_str());

    // The effect fails: nothing of it, and no record, survives.
    let claim = Claim {
        scope: &scope,
        key: &key,
        fingerprint: &fingerprint,
        policy: policy(),
    };
    let failed = store
        .write_once(Some(&claim), |transaction| {
            let tag = tag.clone();
            Box::pin(async move {
                transaction
                    .run(
                        EFFECT_INSERT.get::<D>(),
                        &[Arg::Text(&unique("effect")), Arg::Text(&tag)],
                    )
                    .await
                    .expect("insert");
                Err::<((), StoredResponse), _>(StoreError::Corrupt("the effect refused".to_owned()))
            })
        })
        .await;
    assert!(failed.is_err());
    assert_eq!(
        effects(&store, &tag).await,
        0,
        "the failed effect rolled back"
    );
    assert_eq!(
        store.find_record(&scope, &key).await.expect("find"),
        None,
        "and its record with it"
    );

    const TASKS: usize = 16;
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let (store, scope, key, tag) = (store.clone(), scope.clone(), key.clone(), tag.clone());
        tasks.push(tokio::spawn(async move {
            let claim = Claim {
                scope: &scope,
                key: &key,
                fingerprint: &fingerprint,
                policy: policy(),
            };
            store
                .write_once(Some(&claim), |transaction| {
                    let tag = tag.clone();
                    Box::pin(async move {
                        transaction
                            .run(
                                EFFECT_INSERT.get::<D>(),
                                &[Arg::Text(&format!("{tag}/{task}")), Arg::Text(&tag)],
                            )
                            .await
                            .map_err(mideng::store::sql::store_error::<D>)?;
                        let answer = StoredResponse {
                            status: 201,
                            headers: vec![],
                            body: format!("task {task}").into_bytes(),
                        };
                        Ok((task, answer))
                    })
                })
                .await
        }));
    }
    let mut ran = Vec::new();
    let mut replayed = Vec::new();
    for task in tasks {
        match task.await.expect("task ran").expect("write_once") {
            Once::Ran(task, answer) => ran.push((task, answer)),
            Once::Decided(Decision::Replay(answer)) => replayed.push(answer),
            other => panic!("a duplicate waits for the first and replays it: {other:?}"),
        }
    }
    assert_eq!(ran.len(), 1, "exactly one task ran the effect");
    assert_eq!(effects(&store, &tag).await, 1, "exactly one effect");
    let (_, answer) = &ran[0];
    assert_eq!(replayed.len(), TASKS - 1);
    assert!(
        replayed.iter().all(|replay| replay == answer),
        "every other task got its answer"
    );

    // The key reused for another request: nothing runs, nothing is written.
    let other = Fingerprint::of_parts(&[b"deduct 999"]);
    let reused = Claim {
        scope: &scope,
        key: &key,
        fingerprint: &other,
        policy: policy(),
    };
    let once = store
        .write_once(Some(&reused), |_| {
            Box::pin(async { panic!("the effect of a reused key must not run") })
        })
        .await
        .expect("write_once");
    assert_eq!(once, Once::<()>::Decided(Decision::Mismatch));
    assert_eq!(effects(&store, &tag).await, 1);
}

/// Relay rounds until a row is parked: the parked rows, and how many the rounds parked.
#[cfg(feature = "nats")]
/// A record written once, completed, after the caller's act: the first write stores the
/// answer that every later `begin` replays; a second write of the key writes nothing and says
/// so, and a rolled-back one leaves no record.
async fn a_record_written_completed_replays_its_answer<D: Dialect>(store: SqlStore<D>) {
    use mideng::store::sql::FirstClaim;
    let scope = Scope::new(&unique("tenant"), "wallet.deduct").expect("scope");
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let fingerprint = Fingerprint::of_parts(&[b"deduct 100"]);
    let first = FirstClaim::new(&scope, &key, &fingerprint, &policy());

    // Rolled back: nothing is left.
    let mut transaction = store.begin_write().await.expect("begin");
    assert!(
        store
            .insert_completed_in(&mut transaction, &first, &answer())
            .await
            .expect("written")
    );
    transaction.rollback().await.expect("rollback");
    assert!(matches!(
        store
            .begin(&scope, &key, &fingerprint, &policy())
            .await
            .expect("begin"),
        Decision::Proceed(_)
    ));
    // That begin left a record in progress: a new key for the committed case.
    let key = IdempotencyKey::parse(&unique("key")).expect("key");
    let first = FirstClaim::new(&scope, &key, &fingerprint, &policy());
    let mut transaction = store.begin_write().await.expect("begin");
    assert!(
        store
            .insert_completed_in(&mut transaction, &first, &answer())
            .await
            .expect("written")
    );
    transaction.commit().await.expect("commit");
    // A second writer of the key (a duplicate that acted meanwhile) writes nothing.
    let again = FirstClaim::new(&scope, &key, &fingerprint, &policy());
    let mut transaction = store.begin_write().await.expect("begin");
    assert!(
        !store
            .insert_completed_in(&mut transaction, &again, &answer())
            .await
            .expect("answered")
    );
    transaction.rollback().await.expect("rollback");
    match store
        .begin(&scope, &key, &fingerprint, &policy())
        .await
        .expect("begin")
    {
        Decision::Replay(stored) => assert_eq!(stored, answer()),
        other => panic!("the completed record replays its answer, not {other:?}"),
    }
    assert!(matches!(
        store
            .begin(
                &scope,
                &key,
                &Fingerprint::of_parts(&[b"deduct 200"]),
                &policy()
            )
            .await
            .expect("begin"),
        Decision::Mismatch
    ));
}

async fn until_parked<D: Dialect>(
    relay: &mideng::outbox::sql::Relay<D>,
    store: &SqlStore<D>,
) -> (Vec<mideng::outbox::sql::ParkedRow>, u32) {
    let started = std::time::Instant::now();
    let mut parked_in_rounds = 0;
    loop {
        let round = relay.run_once().await.expect("round");
        parked_in_rounds += round.parked;
        let shown = mideng::outbox::sql::parked(store, 100)
            .await
            .expect("parked");
        if !shown.is_empty() {
            return (shown, parked_in_rounds);
        }
        assert!(started.elapsed() < Duration::from_secs(30), "never parked");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An outbox row the broker keeps refusing is parked after the relay's bound and left out of
/// its rounds and of the backlog, while the row beside it is sent; a person replays it (it is
/// refused and parked again) or discards it, the reason kept; and a relay that cannot reach
/// its broker at all never parks anything, however many rounds it fails. On real NATS
/// JetStream, on a database of the test's own (a relay takes every row of its outbox).
#[cfg(feature = "nats")]
async fn a_row_the_broker_keeps_refusing_is_parked_and_an_outage_never_parks<D: Dialect>(
    store: SqlStore<D>,
) {
    use std::sync::Arc;
    use std::time::Instant;

    use mideng::outbox::nats::{NatsPublisher, NatsSettings};
    use mideng::outbox::sql::{
        Relay, RelaySettings, backlog, discard_parked, enqueue_in, parked, replay_parked,
    };

    const PARK_AFTER: u32 = 3;
    let settings = RelaySettings {
        batch: 10,
        claim_lease: Duration::from_secs(2),
        publish_timeout: Duration::from_secs(1),
        retry_cap: Duration::from_secs(1),
        park_after_refusals: PARK_AFTER,
    };
    let enqueue = |topic: &'static str| {
        let store = store.clone();
        async move {
            let mut transaction = store.begin_write().await.expect("begin");
            let id = enqueue_in::<D>(&mut transaction, topic, "P1", b"{}")
                .await
                .expect("enqueue");
            transaction.commit().await.expect("commit");
            id
        }
    };
    let good = enqueue("payment.succeeded").await;

    // An outage first: a broker nobody listens for. Rounds fail, nothing is parked.
    let closed = std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind")
        .local_addr()
        .expect("addr")
        .port();
    let unreachable = Relay::new(
        store.clone(),
        Arc::new(NatsPublisher::new(NatsSettings {
            url: format!("nats://127.0.0.1:{closed}").into(),
            ..NatsSettings::default()
        })),
        settings,
    )
    .expect("relay");
    let started = Instant::now();
    let mut failed_rounds = 0;
    while failed_rounds < 5 {
        let round = unreachable.run_once().await.expect("round");
        assert_eq!((round.sent, round.parked), (0, 0), "{round:?}");
        failed_rounds += u32::from(round.claimed > 0);
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "rows never due"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(parked(&store, 100).await.expect("parked").is_empty());
    assert_eq!(backlog(&store).await.expect("backlog").unsent, 1);

    // A topic the NATS publisher refuses (an empty subject token, refused before it reaches
    // the server), written beside it.
    let poison = enqueue("poison..row").await;

    // The real broker: the valid row is sent, the poison row is refused and parked.
    let stream = unique("PARK").replace('-', "_").to_uppercase();
    let relay = Relay::new(
        store.clone(),
        Arc::new(NatsPublisher::new(NatsSettings {
            stream: stream.clone(),
            subject_prefix: stream.to_lowercase(),
            ..NatsSettings::default()
        })),
        settings,
    )
    .expect("relay");
    let (shown, counted) = until_parked(&relay, &store).await;
    assert_eq!(counted, 1);
    assert_eq!(shown.len(), 1, "{shown:?}");
    assert_eq!(shown[0].id, poison);
    assert_eq!(shown[0].refusals, i64::from(PARK_AFTER), "{shown:?}");
    assert!(shown[0].last_error.contains("refused"), "{shown:?}");
    let left = backlog(&store).await.expect("backlog");
    assert_eq!(
        left.unsent, 0,
        "the valid row sent, the parked one left out: {left:?}"
    );
    let round = relay.run_once().await.expect("round");
    assert_eq!(
        round.claimed, 0,
        "a parked row is not taken again: {round:?}"
    );
    assert!(
        !replay_parked(&store, &good, "not parked")
            .await
            .expect("replay"),
        "only a parked row is replayed"
    );

    // Replayed: due again, refused again, parked again after as many refusals.
    assert!(
        replay_parked(&store, &poison, "stream fixed")
            .await
            .expect("replay")
    );
    assert!(parked(&store, 100).await.expect("parked").is_empty());
    assert_eq!(backlog(&store).await.expect("backlog").unsent, 1);
    let (shown, _) = until_parked(&relay, &store).await;
    assert_eq!(shown[0].refusals, i64::from(PARK_AFTER), "{shown:?}");

    // Discarded: finished, with its reason; nothing left to send or to list.
    assert!(
        discard_parked(&store, &poison, "a topic nobody consumes")
            .await
            .expect("discard")
    );
    assert!(
        !discard_parked(&store, &poison, "again")
            .await
            .expect("discard")
    );
    assert!(parked(&store, 100).await.expect("parked").is_empty());
    assert_eq!(backlog(&store).await.expect("backlog").unsent, 0);
    assert_eq!(relay.run_once().await.expect("round").claimed, 0);

    // The broker holds the valid row, once; the test's stream goes.
    let client = async_nats::connect(NatsSettings::default().url.expose())
        .await
        .expect("NATS reachable on 127.0.0.1:4222");
    let jetstream = async_nats::jetstream::new(client);
    let mut created = jetstream.get_stream(&stream).await.expect("stream");
    assert_eq!(created.info().await.expect("info").state.messages, 1);
    jetstream
        .delete_stream(&stream)
        .await
        .expect("stream deleted");
}

macro_rules! dialect_suite {
    ($name:ident, $make:path, $isolated:path) => {
        mod $name {
            use super::*;

            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn record_commits_and_rolls_back_with_the_business_write() {
                super::record_commits_and_rolls_back_with_the_business_write($make().await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_concurrent_begin_waits_for_the_open_transaction() {
                super::a_concurrent_begin_waits_for_the_open_transaction($make().await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_record_written_completed_replays_its_answer() {
                super::a_record_written_completed_replays_its_answer($make().await).await;
            }
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn write_once_runs_the_effect_once_with_its_answer() {
                super::write_once_runs_the_effect_once_with_its_answer($make().await).await;
            }
            #[cfg(feature = "nats")]
            #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
            async fn a_row_the_broker_keeps_refusing_is_parked_and_an_outage_never_parks() {
                super::a_row_the_broker_keeps_refusing_is_parked_and_an_outage_never_parks(
                    $isolated().await,
                )
                .await;
            }
        }
    };
}

/// A record written by the act's own statement, outside a transaction
/// (`postgres_recorded_cte!`): the first statement of a key acts and stores the template's
/// answer with the statement's value in its hole, which `begin` then replays byte for byte;
/// the same key sent by many tasks at once acts once, every other statement acting on nothing
/// (the key was taken before it, or its record insert met the first one's and undid it).
#[cfg(feature = "postgres")]
mod recorded_by_the_act {
    use std::sync::Arc;

    use mideng::record::AnswerTemplate;
    use mideng::store::sql::{Arg, FirstClaim, SqlConn, SqlRow, is_unique_violation};
    use mideng::{Decision, Fingerprint, IdempotencyKey, RecordStore, Scope, StoredResponse};

    use super::{policy, support, unique};

    /// `$13` is a counter's name: the act adds one to it and answers the count after.
    const ACT: &str = concat!(
        "WITH ",
        mideng::postgres_unrecorded_cte!(),
        ", acted AS (INSERT INTO mideng_test_counters (name, count) SELECT $13, 1 FROM claim \
         ON CONFLICT (name) DO UPDATE SET count = mideng_test_counters.count + 1 RETURNING count), ",
        mideng::postgres_recorded_cte!("acted", "count"),
        " SELECT (SELECT count FROM acted), (SELECT COUNT(*) FROM recorded)"
    );

    fn rendered(count: &str) -> StoredResponse {
        StoredResponse {
            status: 201,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: format!("{{\"count\":{count}}}").into_bytes(),
        }
    }

    /// Runs the act once: the count it answered, `None` when it acted on nothing.
    async fn act(
        store: &mideng::store::sql::postgres::PostgresStore,
        first: &FirstClaim,
        name: &str,
    ) -> Option<i64> {
        let template = AnswerTemplate::new(&rendered("HOLE"), b"HOLE").expect("template");
        let mut connection = store.pool().acquire().await.expect("connection");
        let [a, b, c, d, e, f, g, h, i, j, k, l] = first.recorded_args(&template);
        let args = [a, b, c, d, e, f, g, h, i, j, k, l, Arg::Text(name)];
        match connection.row(ACT, &args).await {
            Ok(row) => {
                let row = row.expect("one row");
                let count = row.opt_int(0).expect("count");
                let recorded = row.int(1).expect("recorded");
                assert_eq!(
                    recorded,
                    i64::from(count.is_some()),
                    "a record with every act"
                );
                count
            }
            Err(error) if is_unique_violation(&error) => None,
            Err(error) => panic!("{error}"),
        }
    }

    async fn count(store: &mideng::store::sql::postgres::PostgresStore, name: &str) -> i64 {
        let mut connection = store.pool().acquire().await.expect("connection");
        connection
            .row(
                "SELECT count FROM mideng_test_counters WHERE name = $1",
                &[Arg::Text(name)],
            )
            .await
            .expect("read")
            .map_or(0, |row| row.int(0).expect("count"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn the_act_and_its_record_are_one_statement() {
        let store = Arc::new(support::postgres_store().await);
        let mut connection = store.pool().acquire().await.expect("connection");
        connection
            .run(
                "CREATE TABLE IF NOT EXISTS mideng_test_counters (name TEXT PRIMARY KEY, count BIGINT NOT NULL)",
                &[],
            )
            .await
            .expect("table");
        drop(connection);
        let scope = Scope::new(&unique("tenant"), "counter.add").expect("scope");
        let fingerprint = Fingerprint::of_parts(&[b"add one"]);

        // Alone: it acts, and the record replays the answer with the count filled in.
        let key = IdempotencyKey::parse(&unique("key")).expect("key");
        let name = unique("counter");
        let first = FirstClaim::new(&scope, &key, &fingerprint, &policy());
        assert_eq!(act(&store, &first, &name).await, Some(1));
        let again = FirstClaim::new(&scope, &key, &fingerprint, &policy());
        assert_eq!(act(&store, &again, &name).await, None, "the key is taken");
        assert_eq!(count(&store, &name).await, 1);
        match store
            .begin(&scope, &key, &fingerprint, &policy())
            .await
            .expect("begin")
        {
            Decision::Replay(stored) => assert_eq!(stored, rendered("1")),
            other => panic!("the statement's record replays its answer, not {other:?}"),
        }

        // Thirty-two at once under one key: one acts.
        let key = IdempotencyKey::parse(&unique("key")).expect("key");
        let name = unique("counter");
        let tasks: Vec<_> = (0..32)
            .map(|_| {
                let (store, scope, key, name) =
                    (store.clone(), scope.clone(), key.clone(), name.clone());
                tokio::spawn(async move {
                    let first = FirstClaim::new(&scope, &key, &fingerprint, &policy());
                    act(&store, &first, &name).await
                })
            })
            .collect();
        let mut acted = Vec::new();
        for task in tasks {
            acted.extend(task.await.expect("task"));
        }
        assert_eq!(acted, vec![1], "exactly one statement acted");
        assert_eq!(count(&store, &name).await, 1, "exactly one effect");
        match store
            .begin(&scope, &key, &fingerprint, &policy())
            .await
            .expect("begin")
        {
            Decision::Replay(stored) => assert_eq!(stored, rendered("1")),
            other => panic!("the winner's record replays its answer, not {other:?}"),
        }
    }
}

#[cfg(feature = "sqlite")]
dialect_suite!(sqlite, support::sqlite_store, support::sqlite_store);
#[cfg(feature = "postgres")]
dialect_suite!(
    postgres,
    support::postgres_store,
    support::isolated_postgres_store
);
#[cfg(feature = "mysql")]
dialect_suite!(mysql, support::mysql_store, support::isolated_mysql_store);
