//! Wallet credits and deducts under duplicates and concurrency.

use std::sync::Arc;

use mideng_pay::domain::wallet::WalletStrategy;
use mideng_pay::flows::PaymentSettings;
use serde_json::json;

use crate::harness::{Backend, Service, race, unique};

async fn credit(service: &Service, user: &str, amount: i64) {
    let key = unique("credit");
    let answer = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": amount, "reference": key}),
            &[("Idempotency-Key", &key)],
        )
        .await;
    assert_eq!(answer.status, 200, "{}", answer.json());
}

pub(crate) async fn one_key_debits_once(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let user = unique("u");
    credit(&service, &user, 10_000).await;
    let key = unique("deduct");
    let answers = race(100, |_| {
        let (service, user, key) = (service.clone(), user.clone(), key.clone());
        async move {
            service
                .post(
                    &format!("/v1/wallets/{user}/deduct"),
                    json!({"order_id": "o-1", "amount": 700}),
                    &[("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    let successes: Vec<_> = answers
        .iter()
        .filter(|answer| answer.status == 200)
        .collect();
    assert!(!successes.is_empty());
    for answer in &answers {
        assert_eq!(
            answer.status,
            200,
            "a duplicate waits for the first answer: {}",
            String::from_utf8_lossy(&answer.body)
        );
    }
    assert!(
        successes
            .iter()
            .all(|answer| answer.body == successes[0].body),
        "every answer is the same deduction, byte for byte"
    );
    assert_eq!(
        successes
            .iter()
            .filter(|answer| answer.header("idempotent-replayed").is_none())
            .count(),
        1,
        "one execution; the rest are replays"
    );
    // Each answer names its request; each replay also names the request that debited.
    let first = successes
        .iter()
        .find(|answer| answer.header("idempotent-replayed").is_none())
        .expect("the first answer");
    assert!(first.header("original-request-id").is_none());
    let debited_by = first.header("request-id").expect("a request id");
    for answer in successes
        .iter()
        .filter(|answer| answer.header("idempotent-replayed").is_some())
    {
        assert_eq!(answer.header("original-request-id"), Some(debited_by));
        assert_ne!(answer.header("request-id"), Some(debited_by));
    }
    assert_eq!(service.balance_and_debits(&user).await, (9_300, 1));

    // The same order under another key: refused, naming the earlier deduction.
    let other = service
        .post(
            &format!("/v1/wallets/{user}/deduct"),
            json!({"order_id": "o-1", "amount": 700}),
            &[("Idempotency-Key", "another-key")],
        )
        .await;
    assert_eq!(other.status, 409);
    assert_eq!(other.code(), "already-deducted");
    assert_eq!(
        other.json()["existing"]["deduction_no"],
        successes[0].json()["deduction_no"]
    );
    // The key reused for another deduction: 422, nothing debited.
    let reused = service
        .post(
            &format!("/v1/wallets/{user}/deduct"),
            json!({"order_id": "o-2", "amount": 700}),
            &[("Idempotency-Key", &key)],
        )
        .await;
    assert_eq!(reused.status, 422);
    assert_eq!(reused.code(), "idempotency-key-reused");
    assert_eq!(
        service.get(&format!("/v1/wallets/{user}")).await.json()["balance"],
        9_300
    );
}

/// One key sent at once with forty different deducts (each another order): one of them debits
/// and the others are refused as the key's reuse, whichever wrote the key's record first; the
/// wallet holds exactly one debit. On PostgreSQL each deduct debits before it writes the
/// record, so the losers' debits are rolled back when they meet the winner's record.
pub(crate) async fn one_key_sent_with_different_deducts_at_once_debits_once(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let user = unique("u");
    credit(&service, &user, 10_000).await;
    let key = unique("deduct");
    let answers = race(40, |index| {
        let (service, user, key) = (service.clone(), user.clone(), key.clone());
        async move {
            service
                .post(
                    &format!("/v1/wallets/{user}/deduct"),
                    json!({"order_id": format!("o-{index}"), "amount": 100}),
                    &[("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    let executed: Vec<_> = answers
        .iter()
        .filter(|answer| answer.status == 200 && answer.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(executed.len(), 1, "one deduct ran under the key");
    for answer in &answers {
        assert!(
            answer.status == 200
                || (answer.status == 422 && answer.code() == "idempotency-key-reused")
                || (answer.status == 409 && answer.code() == "in-progress"),
            "{} {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }
    assert_eq!(service.balance_and_debits(&user).await, (9_900, 1));
}

pub(crate) async fn identical_concurrent_credits_credit_once_and_answer_alike(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let user = unique("u");
    let key = unique("credit");
    let answers = race(20, |_| {
        let (service, user, key) = (service.clone(), user.clone(), key.clone());
        async move {
            service
                .post(
                    &format!("/v1/wallets/{user}/credit"),
                    json!({"amount": 1_500, "reference": "top-up-1"}),
                    &[("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    for answer in &answers {
        assert_eq!(
            answer.status,
            200,
            "a duplicate waits for the first answer instead of a 409: {}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(
            answer.body, answers[0].body,
            "the same answer, byte for byte"
        );
    }
    assert_eq!(
        answers
            .iter()
            .filter(|answer| answer.header("idempotent-replayed").is_none())
            .count(),
        1,
        "one execution; the rest are replays"
    );
    let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
    assert_eq!(wallet["balance"], 1_500, "credited once");
    assert_eq!(wallet["entries"].as_array().map(Vec::len), Some(1));
}

pub(crate) async fn one_reference_credits_once_whatever_the_key(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let user = unique("u");
    let answers = race(30, |index| {
        let (service, user) = (service.clone(), user.clone());
        async move {
            service
                .post(
                    &format!("/v1/wallets/{user}/credit"),
                    json!({"amount": 800, "reference": "top-up-9"}),
                    &[("Idempotency-Key", &format!("credit-{index}"))],
                )
                .await
        }
    })
    .await;
    let credited: Vec<_> = answers
        .iter()
        .filter(|answer| answer.status == 200)
        .collect();
    assert_eq!(credited.len(), 1, "one credit per user and reference");
    let first = credited[0].json();
    for answer in answers.iter().filter(|answer| answer.status != 200) {
        assert_eq!(
            (answer.status, answer.code().as_str()),
            (409, "already-credited"),
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(answer.json()["existing"]["entry_no"], first["entry_no"]);
        assert_eq!(answer.json()["existing"]["amount"], 800);
    }
    let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
    assert_eq!(wallet["balance"], 800, "credited once");

    // The refusal is stored under its key: a retry answers the same.
    let refused = answers
        .iter()
        .position(|answer| answer.status == 409)
        .expect("a refusal");
    let retry = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 800, "reference": "top-up-9"}),
            &[("Idempotency-Key", &format!("credit-{refused}"))],
        )
        .await;
    assert_eq!(retry.status, 409);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, answers[refused].body);
    // Another reference credits.
    let other = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 200, "reference": "top-up-10"}),
            &[("Idempotency-Key", "credit-other")],
        )
        .await;
    assert_eq!(other.status, 200, "{}", other.json());
    assert_eq!(other.json()["balance"], 1_000);
}

pub(crate) async fn distinct_keys_never_overdraw(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let user = unique("u");
    credit(&service, &user, 1_000).await;
    let answers = race(50, |index| {
        let (service, user) = (service.clone(), user.clone());
        async move {
            let key = format!("deduct-{index}");
            service
                .post(
                    &format!("/v1/wallets/{user}/deduct"),
                    json!({"order_id": format!("o-{index}"), "amount": 30}),
                    &[("Idempotency-Key", &key)],
                )
                .await
        }
    })
    .await;
    let debited = answers.iter().filter(|answer| answer.status == 200).count();
    for answer in answers.iter().filter(|answer| answer.status != 200) {
        assert_eq!(
            answer.status,
            422,
            "{}",
            String::from_utf8_lossy(&answer.body)
        );
        assert_eq!(answer.code(), "insufficient-funds");
    }
    assert_eq!(debited, 33, "1000 / 30: exactly 33 fit");
    let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
    assert_eq!(wallet["balance"], 10);
    // The statement is the ledger in the order the wallet moved, though the 33 debits were
    // written within the same few milliseconds: newest first, each balance the one before it
    // moved by the entry's amount, down to the credit.
    let entries = wallet["entries"].as_array().expect("entries");
    assert_eq!(entries.len(), 34);
    for pair in entries.windows(2) {
        let (newer, older) = (&pair[0], &pair[1]);
        let moved = match newer["kind"].as_str() {
            Some("DEBIT") => -newer["amount"].as_i64().expect("amount"),
            _ => newer["amount"].as_i64().expect("amount"),
        };
        assert_eq!(
            newer["balance_after"].as_i64(),
            older["balance_after"].as_i64().map(|before| before + moved),
            "{newer} after {older}"
        );
    }
    assert_eq!(entries[33]["kind"], "CREDIT");
    assert_eq!(entries[33]["balance_after"], 1_000);
    // The whole ledger a page at a time, oldest first: the same entries in the wallet's order,
    // each once, whatever page size.
    for limit in [5, 34, 100] {
        let mut paged = Vec::new();
        let mut after = String::new();
        let mut pages = 0;
        loop {
            let path = if after.is_empty() {
                format!("/v1/wallets/{user}/entries?limit={limit}")
            } else {
                format!("/v1/wallets/{user}/entries?limit={limit}&starting_after={after}")
            };
            let page = service.get(&path).await.json();
            let data = page["data"].as_array().expect("data").clone();
            pages += 1;
            if let Some(last) = data.last() {
                after = last["entry_no"].as_str().expect("entry_no").to_owned();
            }
            paged.extend(data);
            if page["has_more"] != true {
                break;
            }
        }
        let mut oldest_first = entries.clone();
        oldest_first.reverse();
        assert_eq!(paged, oldest_first, "limit {limit}");
        assert_eq!(pages, 34_usize.div_ceil(limit), "limit {limit}");
    }
    let refused = service
        .get(&format!(
            "/v1/wallets/{user}/entries?starting_after=E-nobody"
        ))
        .await;
    assert_eq!(
        (refused.status, refused.code().as_str()),
        (400, "invalid-query")
    );

    // A refusal is stored: retrying it answers the same, even after money arrived.
    let refused_index = answers
        .iter()
        .position(|answer| answer.status == 422)
        .expect("a refusal");
    credit(&service, &user, 1_000).await;
    let retry = service
        .post(
            &format!("/v1/wallets/{user}/deduct"),
            json!({"order_id": format!("o-{refused_index}"), "amount": 30}),
            &[("Idempotency-Key", &format!("deduct-{refused_index}"))],
        )
        .await;
    assert_eq!(retry.status, 422);
    assert_eq!(retry.header("idempotent-replayed"), Some("true"));
    assert_eq!(retry.body, answers[refused_index].body);
    assert_eq!(
        service.get(&format!("/v1/wallets/{user}")).await.json()["balance"],
        1_010
    );
}

/// Many requests under distinct keys racing to deduct for one order: the ledger's
/// one-debit-per-order key picks one, every other answer names it, the balance moves once —
/// whichever strategy, and on PostgreSQL through the one-statement deduct.
pub(crate) async fn distinct_keys_for_one_order_debit_once(backend: Backend) {
    for strategy in WalletStrategy::ALL {
        let payments = PaymentSettings {
            wallet_strategy: strategy,
            ..PaymentSettings::default()
        };
        let service = Arc::new(Service::start_with(backend, payments).await);
        let user = unique("u");
        credit(&service, &user, 1_000).await;
        let answers = race(30, |index| {
            let (service, user) = (service.clone(), user.clone());
            async move {
                service
                    .post(
                        &format!("/v1/wallets/{user}/deduct"),
                        json!({"order_id": "o-shared", "amount": 300}),
                        &[("Idempotency-Key", &format!("deduct-{index}"))],
                    )
                    .await
            }
        })
        .await;
        let debits: Vec<_> = answers
            .iter()
            .filter(|answer| answer.status == 200)
            .collect();
        assert_eq!(debits.len(), 1, "{strategy}: one debit for the order");
        let deduction_no = debits[0].json()["deduction_no"].clone();
        for answer in answers.iter().filter(|answer| answer.status != 200) {
            // The optimistic strategy may give up on a lost race (503, nothing moved).
            if strategy == WalletStrategy::Optimistic && answer.status == 503 {
                continue;
            }
            assert_eq!(answer.status, 409, "{strategy}: {}", answer.json());
            assert_eq!(answer.code(), "already-deducted");
            assert_eq!(
                answer.json()["existing"]["deduction_no"],
                deduction_no,
                "{strategy}: every refusal names the one debit"
            );
        }
        let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
        assert_eq!(wallet["balance"], 700, "{strategy}: the balance moved once");
    }
}

/// Group commit under a crowd: 150 deducts at once, 60 on one hot wallet, 60 spread over six
/// wallets and 30 sent twice under the same key. Each wallet is debited exactly as far as its
/// balance allows, each answer's balance is the one its ledger entry holds, each wallet's
/// ledger is a chain (every balance the one before it moved by the entry), the duplicates
/// answer the same bytes, and a retry of every success replays it.
pub(crate) async fn group_commit_settles_each_deduct_once(backend: Backend) {
    let payments = PaymentSettings {
        wallet_strategy: WalletStrategy::GroupCommit,
        ..PaymentSettings::default()
    };
    let service = Arc::new(Service::start_with(backend, payments).await);
    let hot = unique("hot");
    let users: Vec<String> = (0..6).map(|_| unique("u")).collect();
    credit(&service, &hot, 1_000).await;
    for user in &users {
        credit(&service, user, 1_000).await;
    }
    // What each request is: its wallet, its key, its order, its amount.
    let requests: Vec<(String, String, String, i64)> = (0..150)
        .map(|index| match index {
            0..60 => (hot.clone(), format!("k-{index}"), format!("o-{index}"), 30),
            60..120 => (
                users[index % 6].clone(),
                format!("k-{index}"),
                format!("o-{index}"),
                300,
            ),
            // The same request as index - 30 (on a spread wallet), sent again at once.
            _ => (
                users[(index - 30) % 6].clone(),
                format!("k-{}", index - 30),
                format!("o-{}", index - 30),
                300,
            ),
        })
        .collect();
    let requests = Arc::new(requests);
    let answers = race(requests.len(), |index| {
        let (service, requests) = (service.clone(), requests.clone());
        async move {
            let (user, key, order, amount) = &requests[index];
            service
                .post(
                    &format!("/v1/wallets/{user}/deduct"),
                    json!({"order_id": order, "amount": amount}),
                    &[("Idempotency-Key", key)],
                )
                .await
        }
    })
    .await;
    for (index, answer) in answers.iter().enumerate() {
        assert!(
            answer.status == 200 || (answer.status == 422 && answer.code() == "insufficient-funds"),
            "request {index}: {} {}",
            answer.status,
            String::from_utf8_lossy(&answer.body)
        );
    }
    for index in 120..150 {
        assert_eq!(
            answers[index].body,
            answers[index - 30].body,
            "a duplicate answers the same bytes"
        );
    }
    let debited = |range: std::ops::Range<usize>| {
        answers[range]
            .iter()
            .filter(|answer| answer.status == 200)
            .count()
    };
    assert_eq!(debited(0..60), 33, "1000 / 30 on the hot wallet");
    assert_eq!(debited(60..120), 6 * 3, "1000 / 300 on each spread wallet");
    for (user, left) in users
        .iter()
        .map(|user| (user, 100))
        .chain(std::iter::once((&hot, 10)))
    {
        let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
        assert_eq!(wallet["balance"], left, "{user}");
        let entries = wallet["entries"].as_array().expect("entries");
        for pair in entries.windows(2) {
            let (newer, older) = (&pair[0], &pair[1]);
            let moved = match newer["kind"].as_str() {
                Some("DEBIT") => -newer["amount"].as_i64().expect("amount"),
                _ => newer["amount"].as_i64().expect("amount"),
            };
            assert_eq!(
                newer["balance_after"].as_i64(),
                older["balance_after"].as_i64().map(|before| before + moved),
                "{user}: {newer} after {older}"
            );
        }
        for answer in answers.iter().filter(|answer| answer.status == 200) {
            let debit = answer.json();
            if let Some(entry) = entries
                .iter()
                .find(|entry| entry["entry_no"] == debit["deduction_no"])
            {
                assert_eq!(entry["balance_after"], debit["balance_after"], "{debit}");
            }
        }
    }
    // Every success again: a replay of the same bytes.
    for (index, answer) in answers.iter().enumerate().take(120) {
        if answer.status != 200 {
            continue;
        }
        let (user, key, order, amount) = &requests[index];
        let again = service
            .post(
                &format!("/v1/wallets/{user}/deduct"),
                json!({"order_id": order, "amount": amount}),
                &[("Idempotency-Key", key)],
            )
            .await;
        assert_eq!(again.header("idempotent-replayed"), Some("true"));
        assert_eq!(again.body, answer.body);
    }
}

/// With the idempotency machinery off (measurement only), the money routes take no key and
/// keep no record, and the ledger's one-debit-per-order constraint still refuses a second
/// deduct for an order.
pub(crate) async fn without_the_machinery_the_constraint_still_refuses(backend: Backend) {
    let payments = PaymentSettings {
        idempotency: false,
        ..PaymentSettings::default()
    };
    let service = Service::start_with(backend, payments).await;
    let user = unique("u");
    let credited = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 1_000, "reference": "r-1"}),
            &[],
        )
        .await;
    assert_eq!(credited.status, 200, "{}", credited.json());
    let deduct_path = format!("/v1/wallets/{user}/deduct");
    let deduct = || service.post(&deduct_path, json!({"order_id": "o-1", "amount": 300}), &[]);
    let first = deduct().await;
    assert_eq!(first.status, 200, "{}", first.json());
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = deduct().await;
    assert_eq!(again.status, 409);
    assert_eq!(again.code(), "already-deducted");
    assert_eq!(
        again.json()["existing"]["deduction_no"],
        first.json()["deduction_no"]
    );
    // A key changes nothing: there is no record to replay from.
    let keyed = service
        .post(
            &deduct_path,
            json!({"order_id": "o-1", "amount": 300}),
            &[("Idempotency-Key", "k-1")],
        )
        .await;
    assert_eq!(keyed.status, 409);
    assert_eq!(keyed.header("idempotent-replayed"), None);
    let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
    assert_eq!(wallet["balance"], 700);

    // And the one-credit-per-reference constraint a second credit.
    let again = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 1_000, "reference": "r-1"}),
            &[],
        )
        .await;
    assert_eq!(
        (again.status, again.code().as_str()),
        (409, "already-credited")
    );
    assert_eq!(
        service.get(&format!("/v1/wallets/{user}")).await.json()["balance"],
        700
    );

    // Payment creation needs no token either.
    let order_id = unique("o");
    service.create_order(&order_id, &user, 500).await;
    let created = service
        .post(
            &format!("/v1/orders/{order_id}/payments"),
            json!({"channel": "alipay"}),
            &[],
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.json());
}

/// Twenty concurrent reversals of one deduction put it back once: one reversal entry, the
/// balance restored once, every answer naming the same reversal.
pub(crate) async fn a_deduction_is_put_back_once(backend: Backend) {
    let service = Arc::new(Service::start(backend).await);
    let user = unique("u");
    credit(&service, &user, 5_000).await;
    let deducted = service
        .post(
            &format!("/v1/wallets/{user}/deduct"),
            json!({"order_id": "o-rev", "amount": 1_800}),
            &[("Idempotency-Key", &unique("deduct"))],
        )
        .await;
    assert_eq!(deducted.status, 200, "{}", deducted.json());
    let deduction = deducted.json()["deduction_no"]
        .as_str()
        .expect("number")
        .to_owned();
    let answers = race(20, |_| {
        let (service, user, deduction) = (service.clone(), user.clone(), deduction.clone());
        async move {
            service
                .post(
                    &format!("/v1/wallets/{user}/deductions/{deduction}/reverse"),
                    json!({}),
                    &[],
                )
                .await
        }
    })
    .await;
    let reversals: std::collections::BTreeSet<String> = answers
        .iter()
        .map(|answer| {
            assert_eq!(answer.status, 200, "{}", answer.json());
            assert_eq!(answer.json()["amount"], 1_800);
            answer.json()["reversal_no"]
                .as_str()
                .expect("number")
                .to_owned()
        })
        .collect();
    assert_eq!(reversals.len(), 1, "one reversal named by every answer");
    assert_eq!(
        answers
            .iter()
            .filter(|answer| answer.header("idempotent-replayed").is_none())
            .count(),
        1,
        "one call made it"
    );
    let wallet = service.get(&format!("/v1/wallets/{user}")).await.json();
    assert_eq!(wallet["balance"], 5_000, "{wallet}");
    assert_eq!(
        wallet["entries"].as_array().map(Vec::len),
        Some(3),
        "credit, debit, one reversal: {wallet}"
    );

    // Nothing to put back, and the reversal's reference is not a client's to take.
    let unknown = service
        .post(
            &format!("/v1/wallets/{user}/deductions/D-no-such/reverse"),
            json!({}),
            &[],
        )
        .await;
    assert_eq!(unknown.status, 404);
    let other = service
        .post(
            &format!("/v1/wallets/{}/deductions/{deduction}/reverse", unique("u")),
            json!({}),
            &[],
        )
        .await;
    assert_eq!(
        other.status, 404,
        "another user's wallet has no such deduction"
    );
    let squatted = service
        .post(
            &format!("/v1/wallets/{user}/credit"),
            json!({"amount": 1, "reference": format!("reversal-{deduction}")}),
            &[("Idempotency-Key", &unique("credit"))],
        )
        .await;
    assert_eq!(squatted.status, 422, "{}", squatted.json());
}
