//! Wallets under races, on every SQL dialect and with every deduct strategy: concurrent
//! deducts never overdraw and money is conserved; concurrent deducts for one order debit once;
//! concurrent credits for one reference credit once; refusals change nothing.

mod support;

use mideng::StoreError;
use mideng::clock::now_ms;
use mideng::store::sql::{Dialect, SqlStore};
use mideng_pay::domain::money::Amount;
use mideng_pay::domain::wallet::{CreditOutcome, DeductOutcome, WalletStrategy};
use mideng_pay::store::rows::wallets::{Deduct, balance, credit, deduct};
use support::unique;

/// One deduct by `strategy` in a write transaction of its own.
async fn deduct_once<D: Dialect>(
    store: &SqlStore<D>,
    strategy: WalletStrategy,
    tenant: &str,
    order: &str,
    amount: i64,
) -> Result<DeductOutcome, StoreError> {
    let entry = unique("D");
    store
        .write(|connection| {
            let request = Deduct {
                tenant_id: tenant,
                user_id: "u1",
                order_id: order,
                amount: fen(amount),
                entry_no: &entry,
                now_ms: now_ms(),
            };
            Box::pin(async move { deduct::<D>(connection, strategy, &request).await })
        })
        .await
}

fn fen(amount: i64) -> Amount {
    Amount::new(amount).expect("valid amount")
}

async fn concurrent_deducts_never_overdraw_and_conserve_money<D: Dialect>(store: SqlStore<D>) {
    for strategy in WalletStrategy::ALL {
        never_overdraw::<D>(&store, strategy).await;
    }
}

async fn never_overdraw<D: Dialect>(store: &SqlStore<D>, strategy: WalletStrategy) {
    let tenant = unique("t");
    let top_up = unique("E");
    let credited = store
        .write(|connection| {
            Box::pin(credit::<D>(
                connection,
                &tenant,
                "u1",
                fen(1000),
                "top-up",
                &top_up,
                now_ms(),
            ))
        })
        .await
        .expect("credit");
    let CreditOutcome::Credited(credited) = credited else {
        panic!("a first credit within bounds is credited: {credited:?}");
    };
    assert_eq!(credited.balance_after_fen, 1000);

    let tasks: Vec<_> = (0..100)
        .map(|index| {
            let (store, tenant) = (store.clone(), tenant.clone());
            tokio::spawn(async move {
                deduct_once(&store, strategy, &tenant, &format!("o{index}"), 30).await
            })
        })
        .collect();
    let (mut debited, mut refused, mut gave_up) = (0_i64, 0, 0);
    for task in tasks {
        match task.await.expect("task") {
            Ok(DeductOutcome::Debited(debit)) => {
                assert!(debit.balance_after_fen >= 0);
                debited += debit.amount_fen;
            }
            Ok(DeductOutcome::InsufficientFunds { balance_fen }) => {
                assert!(
                    balance_fen < 30,
                    "{strategy}: refused with {balance_fen} left"
                );
                refused += 1;
            }
            Ok(DeductOutcome::AlreadyDeducted(_)) => panic!("every order is distinct"),
            // The optimistic strategy gives up after its bounded retries; nothing moved.
            Err(StoreError::Conflict(_)) if strategy == WalletStrategy::Optimistic => {
                gave_up += 1;
            }
            Err(error) => panic!("{strategy}: {error}"),
        }
    }
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(left.fen() + debited, 1000, "{strategy}: money is conserved");
    assert!(debited <= 33 * 30, "{strategy}: never below zero");
    if gave_up == 0 {
        assert_eq!(
            debited,
            33 * 30,
            "{strategy}: as many deducts as the balance allows, no more"
        );
        assert_eq!(refused, 67, "{strategy}");
    }
}

async fn concurrent_deducts_for_one_order_debit_once<D: Dialect>(store: SqlStore<D>) {
    for strategy in WalletStrategy::ALL {
        one_order_debits_once::<D>(&store, strategy).await;
    }
}

async fn one_order_debits_once<D: Dialect>(store: &SqlStore<D>, strategy: WalletStrategy) {
    let tenant = unique("t");
    let top_up = unique("E");
    store
        .write(|connection| {
            Box::pin(credit::<D>(
                connection,
                &tenant,
                "u1",
                fen(500),
                "top-up",
                &top_up,
                now_ms(),
            ))
        })
        .await
        .expect("credit");
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (store, tenant) = (store.clone(), tenant.clone());
            tokio::spawn(async move { deduct_once(&store, strategy, &tenant, "o1001", 100).await })
        })
        .collect();
    let mut debits = Vec::new();
    let mut found = Vec::new();
    for task in tasks {
        match task.await.expect("task") {
            Ok(DeductOutcome::Debited(debit)) => debits.push(debit),
            Ok(DeductOutcome::AlreadyDeducted(existing)) => found.push(existing),
            Ok(DeductOutcome::InsufficientFunds { .. }) => {
                panic!("{strategy}: the balance covers one debit")
            }
            Err(StoreError::Conflict(_)) if strategy == WalletStrategy::Optimistic => {}
            Err(error) => panic!("{strategy}: {error}"),
        }
    }
    assert_eq!(debits.len(), 1, "{strategy}: one debit per user and order");
    assert!(
        found.iter().all(|existing| *existing == debits[0]),
        "{strategy}: the others are shown that debit"
    );
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(left.fen(), 400, "{strategy}");

    let broke = deduct_once(store, strategy, &tenant, "o1002", 401)
        .await
        .expect("deduct");
    assert_eq!(
        broke,
        DeductOutcome::InsufficientFunds { balance_fen: 400 },
        "{strategy}"
    );
    let again = deduct_once(store, strategy, &tenant, "o1001", 100)
        .await
        .expect("deduct");
    assert_eq!(
        again,
        DeductOutcome::AlreadyDeducted(debits[0].clone()),
        "{strategy}: a later deduct for the order names the first"
    );
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(
        left.fen(),
        400,
        "{strategy}: refused deducts change nothing"
    );
}

async fn concurrent_credits_for_one_reference_credit_once<D: Dialect>(store: SqlStore<D>) {
    let tenant = unique("t");
    let tasks: Vec<_> = (0..50)
        .map(|_| {
            let (store, tenant) = (store.clone(), tenant.clone());
            tokio::spawn(async move {
                let entry = unique("C");
                store
                    .write(|connection| {
                        Box::pin(credit::<D>(
                            connection,
                            &tenant,
                            "u1",
                            fen(250),
                            "top-up-7",
                            &entry,
                            now_ms(),
                        ))
                    })
                    .await
            })
        })
        .collect();
    let (mut credits, mut found) = (Vec::new(), Vec::new());
    for task in tasks {
        match task.await.expect("task").expect("no store errors") {
            CreditOutcome::Credited(credit) => credits.push(credit),
            CreditOutcome::AlreadyCredited(existing) => found.push(existing),
            CreditOutcome::TooLarge => panic!("250 fen is far below the bound"),
        }
    }
    assert_eq!(credits.len(), 1, "one credit per user and reference");
    assert_eq!(found.len(), 49);
    assert!(
        found.iter().all(|existing| *existing == credits[0]),
        "the others are shown that credit"
    );
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(left.fen(), 250, "credited once");
}

dialect_suite!(
    concurrent_deducts_never_overdraw_and_conserve_money,
    concurrent_deducts_for_one_order_debit_once,
    concurrent_credits_for_one_reference_credit_once
);

/// The group commit's statement on PostgreSQL, given a group made to cover each case: two
/// wallets' requests debited in one statement, one wallet's in the group's order, each checked
/// against what the ones before it left; a request whose key has a record, one whose order was
/// debited, one the balance no longer covers and the wallet's requests after it, each left
/// out with nothing written; every
/// debited request's record holding its answer with its balance filled in. Then a group that
/// meets a taken entry number in flight is undone whole.
mod group_commit {
    use std::time::Duration;

    use mideng::clock::now_ms;
    use mideng::record::{AnswerTemplate, RecordPolicy, RecordStore, StoredResponse};
    use mideng::store::sql::FirstClaim;
    use mideng::{Decision, Fingerprint, IdempotencyKey, Scope};
    use mideng_pay::domain::wallet::{CreditOutcome, DeductOutcome, WalletStrategy};
    use mideng_pay::store::rows::wallets::{
        Deduct, GroupOutcome, GroupedDeduct, balance, credit, deduct, deduct_group_postgres,
    };

    use super::{fen, support, unique};

    fn policy() -> RecordPolicy {
        RecordPolicy::new(Duration::from_secs(30), Duration::from_secs(3600)).expect("policy")
    }

    fn answer(order: &str, balance: &str) -> StoredResponse {
        StoredResponse {
            status: 200,
            headers: vec![("content-type".to_owned(), "application/json".to_owned())],
            body: format!("{{\"order\":\"{order}\",\"balance_after\":{balance}}}").into_bytes(),
        }
    }

    struct Request {
        key: IdempotencyKey,
        claim: FirstClaim,
        template: AnswerTemplate,
        user: &'static str,
        order: String,
        amount: i64,
        entry_no: String,
    }

    impl Request {
        fn deduct<'a>(&'a self, tenant: &'a str) -> Deduct<'a> {
            Deduct {
                tenant_id: tenant,
                user_id: self.user,
                order_id: &self.order,
                amount: fen(self.amount),
                entry_no: &self.entry_no,
                now_ms: self.claim.now_ms(),
            }
        }
    }

    /// Runs `requests` as one group, each numbered by its place.
    async fn run_group(
        connection: &mut mideng::sqlx::PgConnection,
        tenant: &str,
        requests: &[&Request],
    ) -> GroupOutcome {
        let deducts: Vec<Deduct<'_>> = requests
            .iter()
            .map(|request| request.deduct(tenant))
            .collect();
        let input: Vec<GroupedDeduct<'_>> = requests
            .iter()
            .zip(&deducts)
            .zip(0..)
            .map(|((request, deduct), seq)| {
                GroupedDeduct::new(seq, &request.claim, &request.template, deduct)
            })
            .collect();
        deduct_group_postgres::<mideng::store::sql::postgres::PostgresDialect>(
            connection,
            &input,
            now_ms(),
        )
        .await
        .expect("the group's statement")
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_group_settles_what_it_can_in_one_statement() {
        let store = support::postgres().await;
        let tenant = unique("t");
        let scope = Scope::new(&tenant, "wallet.deduct").expect("scope");
        let fingerprint = Fingerprint::of_parts(&[b"deduct"]);
        for (user, amount) in [("a", 1_000), ("b", 500), ("c", 100)] {
            let top_up = unique("E");
            let credited = store
                .write(|connection| {
                    Box::pin(credit::<mideng::store::sql::postgres::PostgresDialect>(
                        connection,
                        &tenant,
                        user,
                        fen(amount),
                        "top-up",
                        &top_up,
                        now_ms(),
                    ))
                })
                .await
                .expect("credit");
            assert!(matches!(credited, CreditOutcome::Credited(_)));
        }
        // c's order o-c1 debited before, outside the group.
        let entry = unique("D");
        let debited = store
            .write(|connection| {
                let (tenant, entry) = (&tenant, &entry);
                Box::pin(async move {
                    let request = Deduct {
                        tenant_id: tenant,
                        user_id: "c",
                        order_id: "o-c1",
                        amount: fen(10),
                        entry_no: entry,
                        now_ms: now_ms(),
                    };
                    deduct::<mideng::store::sql::postgres::PostgresDialect>(
                        connection,
                        WalletStrategy::ConditionalUpdate,
                        &request,
                    )
                    .await
                })
            })
            .await
            .expect("deduct");
        assert!(matches!(debited, DeductOutcome::Debited(_)));

        let request = |user: &'static str, order: &str, amount: i64| {
            let key = IdempotencyKey::parse(&unique("k")).expect("key");
            let claim = FirstClaim::new(&scope, &key, &fingerprint, &policy());
            let template = AnswerTemplate::new(&answer(order, "HOLE"), b"HOLE").expect("template");
            Request {
                key,
                claim,
                template,
                user,
                order: order.to_owned(),
                amount,
                entry_no: unique("D"),
            }
        };
        let group = [
            request("a", "o-a1", 400),
            request("b", "o-b1", 200),
            request("a", "o-a2", 400),
            request("a", "o-a3", 400), // 1000 - 400 - 400 = 200: not covered
            request("c", "o-c1", 10),  // the order was debited before
            request("b", "o-b2", 300),
            request("c", "o-c2", 20),  // its key has a record: see below
            request("a", "o-a4", 200), // after one not covered: left for its own way
        ];
        // The last c request's key is taken before the group runs.
        assert!(matches!(
            store
                .begin(&scope, &group[6].key, &fingerprint, &policy())
                .await
                .expect("begin"),
            Decision::Proceed(_)
        ));
        let mut connection = store.pool().acquire().await.expect("connection");
        let outcome = run_group(&mut connection, &tenant, &group.iter().collect::<Vec<_>>()).await;
        let GroupOutcome::Committed(mut settled) = outcome else {
            panic!("the group commits: {outcome:?}");
        };
        settled.sort_by_key(|(seq, _)| *seq);
        let settled: Vec<(i64, i64)> = settled
            .into_iter()
            .map(|(seq, after)| (seq, after.fen()))
            .collect();
        assert_eq!(settled, [(0, 600), (1, 300), (2, 200), (5, 0)]);
        for (seq, after) in &settled {
            let request = &group[usize::try_from(*seq).expect("seq")];
            match store
                .begin(&scope, &request.key, &fingerprint, &policy())
                .await
                .expect("begin")
            {
                Decision::Replay(stored) => {
                    assert_eq!(stored, request.template.fill(&after.to_string()));
                    assert_eq!(stored, answer(&request.order, &after.to_string()));
                }
                other => panic!("request {seq} has its record, not {other:?}"),
            }
        }
        // The ones left out wrote nothing: their keys are free (but the one taken before).
        for seq in [3, 4, 7] {
            assert!(matches!(
                store
                    .begin(&scope, &group[seq].key, &fingerprint, &policy())
                    .await
                    .expect("begin"),
                Decision::Proceed(_)
            ));
        }
        type Pg = mideng::store::sql::postgres::PostgresDialect;
        for (user, left) in [("a", 200), ("b", 0), ("c", 90)] {
            let balance = store
                .write(|connection| Box::pin(balance::<Pg>(connection, &tenant, user, now_ms())))
                .await
                .expect("balance");
            assert_eq!(balance.fen(), left, "{user}");
        }
        let statement =
            mideng_pay::store::rows::wallets::statement::<Pg>(&mut connection, &tenant, "a")
                .await
                .expect("statement");
        let afters: Vec<i64> = statement
            .1
            .iter()
            .map(|entry| entry.balance_after_fen)
            .collect();
        assert_eq!(
            afters,
            [200, 600, 1_000],
            "a's ledger, newest first, one entry each"
        );

        // A group meeting an entry number taken meanwhile is undone whole.
        let mut taken = request("a", "o-a5", 1);
        taken.entry_no = group[1].entry_no.clone();
        let fresh = request("c", "o-c3", 5);
        let outcome = run_group(&mut connection, &tenant, &[&fresh, &taken]).await;
        assert!(matches!(outcome, GroupOutcome::Undone), "{outcome:?}");
        let balance = store
            .write(|connection| Box::pin(balance::<Pg>(connection, &tenant, "c", now_ms())))
            .await
            .expect("balance");
        assert_eq!(balance.fen(), 90, "nothing of an undone group stays");
        assert!(matches!(
            store
                .begin(&scope, &fresh.key, &fingerprint, &policy())
                .await
                .expect("begin"),
            Decision::Proceed(_)
        ));
    }
}
