//! Wallets under races, on every SQL dialect: concurrent deducts never overdraw and money is
//! conserved; concurrent deducts for one order debit once; concurrent credits for one reference
//! credit once; refusals change nothing.

mod support;

use mideng::clock::now_ms;
use mideng::store::sql::{Dialect, SqlStore};
use mideng_pay::domain::money::Amount;
use mideng_pay::domain::wallet::{CreditOutcome, DeductOutcome};
use mideng_pay::store::wallets::{balance, credit, deduct};
use support::unique;

fn fen(amount: i64) -> Amount {
    Amount::new(amount).expect("valid amount")
}

async fn concurrent_deducts_never_overdraw_and_conserve_money<D: Dialect>(store: SqlStore<D>) {
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
                let (order, entry) = (format!("o{index}"), unique("D"));
                store
                    .write(|connection| {
                        Box::pin(deduct::<D>(
                            connection,
                            &tenant,
                            "u1",
                            &order,
                            fen(30),
                            &entry,
                            now_ms(),
                        ))
                    })
                    .await
            })
        })
        .collect();
    let (mut debited, mut refused) = (0_i64, 0);
    for task in tasks {
        match task.await.expect("task").expect("no store errors") {
            DeductOutcome::Debited(debit) => {
                assert!(debit.balance_after_fen >= 0);
                debited += debit.amount_fen;
            }
            DeductOutcome::InsufficientFunds { balance_fen } => {
                assert!(balance_fen < 30);
                refused += 1;
            }
            DeductOutcome::AlreadyDeducted(_) => panic!("every order is distinct"),
        }
    }
    assert_eq!(
        debited,
        33 * 30,
        "as many deducts as the balance allows, no more"
    );
    assert_eq!(refused, 67);
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(left.fen() + debited, 1000, "money is conserved");
}

async fn concurrent_deducts_for_one_order_debit_once<D: Dialect>(store: SqlStore<D>) {
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
            tokio::spawn(async move {
                let entry = unique("D");
                store
                    .write(|connection| {
                        Box::pin(deduct::<D>(
                            connection,
                            &tenant,
                            "u1",
                            "o1001",
                            fen(100),
                            &entry,
                            now_ms(),
                        ))
                    })
                    .await
            })
        })
        .collect();
    let mut debits = Vec::new();
    let mut found = Vec::new();
    for task in tasks {
        match task.await.expect("task").expect("no store errors") {
            DeductOutcome::Debited(debit) => debits.push(debit),
            DeductOutcome::AlreadyDeducted(existing) => found.push(existing),
            DeductOutcome::InsufficientFunds { .. } => panic!("the balance covers one debit"),
        }
    }
    assert_eq!(debits.len(), 1, "one debit per user and order");
    assert!(
        found.iter().all(|existing| *existing == debits[0]),
        "the others are shown that debit"
    );
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(left.fen(), 400);

    let refused_entry = unique("D");
    let broke = store
        .write(|connection| {
            Box::pin(deduct::<D>(
                connection,
                &tenant,
                "u1",
                "o1002",
                fen(401),
                &refused_entry,
                now_ms(),
            ))
        })
        .await
        .expect("deduct");
    assert_eq!(broke, DeductOutcome::InsufficientFunds { balance_fen: 400 });
    let left = store
        .write(|connection| Box::pin(balance::<D>(connection, &tenant, "u1", now_ms())))
        .await
        .expect("balance");
    assert_eq!(left.fen(), 400, "a refused deduct changes nothing");
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
