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
