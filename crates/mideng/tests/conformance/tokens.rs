//! The one-time tokens' cases of the conformance suite: spent once under contention, and
//! never more unspent than a scope's limit or the store's.

use std::sync::Arc;
use std::time::Duration;

use mideng::limits::TOKENS_TOTAL_CEILING;
use mideng::token::{Consumption, IssueError, IssuedToken, TokenCap, TokenLimits, TokenStore};

use super::*;

pub(crate) async fn a_token_is_consumed_once_under_contention(stores: Stores) {
    let scope = scope();
    let issued = stores
        .tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue");
    assert!(issued.expires_at_ms > now_ms());
    let outcomes: Vec<Consumption> = race(TASKS, |_| {
        let (tokens, scope, token) = (stores.tokens.clone(), scope.clone(), issued.token.clone());
        async move { tokens.consume_token(&scope, &token).await }
    })
    .await
    .into_iter()
    .map(|outcome| outcome.expect("consume succeeds"))
    .collect();
    assert_eq!(
        outcomes
            .iter()
            .filter(|o| **o == Consumption::Consumed)
            .count(),
        1,
        "consumed exactly once"
    );
    assert!(
        outcomes
            .iter()
            .all(|o| matches!(o, Consumption::Consumed | Consumption::AlreadyConsumed))
    );
    assert_eq!(
        stores
            .tokens
            .consume_token(&scope, &issued.token)
            .await
            .expect("consume"),
        Consumption::AlreadyConsumed
    );

    let other_scope = Scope::new(&unique("tenant"), scope.operation()).expect("scope");
    assert_eq!(
        stores
            .tokens
            .consume_token(&other_scope, &issued.token)
            .await
            .expect("consume"),
        Consumption::Unknown,
        "a token is only good in the scope it was issued for"
    );
    let never_issued = mideng::token::Token::parse(&unique("forged")).expect("token");
    assert_eq!(
        stores
            .tokens
            .consume_token(&scope, &never_issued)
            .await
            .expect("consume"),
        Consumption::Unknown
    );

    let short = stores
        .tokens
        .issue_token(&scope, Duration::from_millis(50))
        .await
        .expect("issue");
    tokio::time::sleep(Duration::from_millis(150)).await;
    assert_eq!(
        stores
            .tokens
            .consume_token(&scope, &short.token)
            .await
            .expect("consume"),
        Consumption::Unknown,
        "expired"
    );
    assert!(
        stores
            .tokens
            .purge_expired_tokens(now_ms(), 100)
            .await
            .expect("purge")
            <= 100
    );
}

pub(crate) async fn a_token_is_bound_to_the_key_that_spent_it(stores: Stores) {
    let scope = scope();
    let issued = stores
        .tokens
        .issue_token(&scope, Duration::from_secs(60))
        .await
        .expect("issue");
    let (mine, other) = (key(), key());
    // Many submissions race, half with one key and half with another: exactly one spends the
    // token, and afterwards only its key passes again.
    let outcomes: Vec<(bool, Consumption)> = race(TASKS, |task| {
        let (tokens, scope, token) = (stores.tokens.clone(), scope.clone(), issued.token.clone());
        let (first, key) = if task % 2 == 0 {
            (true, mine.clone())
        } else {
            (false, other.clone())
        };
        async move {
            let outcome = tokens.consume_token_for(&scope, &token, Some(&key)).await;
            (first, outcome.expect("consume succeeds"))
        }
    })
    .await;
    let winners: Vec<bool> = outcomes
        .iter()
        .filter(|(_, outcome)| *outcome == Consumption::Consumed)
        .map(|(first, _)| *first)
        .collect();
    assert_eq!(winners.len(), 1, "spent exactly once: {outcomes:?}");
    let (winner, loser) = if winners[0] {
        (&mine, &other)
    } else {
        (&other, &mine)
    };
    for (first, outcome) in &outcomes {
        let expected = if *first == winners[0] {
            [Consumption::Consumed, Consumption::SameKey]
        } else {
            [Consumption::AlreadyConsumed, Consumption::AlreadyConsumed]
        };
        assert!(expected.contains(outcome), "{outcome:?} for a racer");
    }
    let spend = |token: &IssuedToken, key: Option<&mideng::IdempotencyKey>| {
        let (tokens, scope, token, key) = (
            stores.tokens.clone(),
            scope.clone(),
            token.token.clone(),
            key.cloned(),
        );
        async move {
            tokens
                .consume_token_for(&scope, &token, key.as_ref())
                .await
                .expect("consume")
        }
    };
    assert_eq!(spend(&issued, Some(winner)).await, Consumption::SameKey);
    assert_eq!(spend(&issued, Some(winner)).await, Consumption::SameKey);
    assert_eq!(
        spend(&issued, Some(loser)).await,
        Consumption::AlreadyConsumed
    );
    assert_eq!(spend(&issued, None).await, Consumption::AlreadyConsumed);

    // Spent without a key: bound to none, every later use is a duplicate.
    let keyless = issue(&stores.tokens, &scope, Duration::from_secs(60)).await;
    assert_eq!(spend(&keyless, None).await, Consumption::Consumed);
    assert_eq!(
        spend(&keyless, Some(&mine)).await,
        Consumption::AlreadyConsumed
    );

    // The binding lives as long as the token: expired, the same key is refused as unknown.
    let short = issue(&stores.tokens, &scope, Duration::from_millis(300)).await;
    assert_eq!(spend(&short, Some(&mine)).await, Consumption::Consumed);
    tokio::time::sleep(Duration::from_millis(450)).await;
    assert_eq!(
        spend(&short, Some(&mine)).await,
        Consumption::Unknown,
        "expired with its binding"
    );
}

fn limits(per_scope_max: u32, total_max: u32) -> TokenLimits {
    TokenLimits::new(per_scope_max, total_max).expect("valid limits")
}

/// The refusal `issued` must be: `cap`, with a wait of at most `within`.
fn assert_full(issued: Result<IssuedToken, IssueError>, cap: TokenCap, within: Duration) {
    match issued {
        Err(IssueError::Full {
            cap: refused_by,
            retry_after,
        }) => {
            assert_eq!(refused_by, cap, "refused by the {} limit", cap.label());
            assert!(
                !retry_after.is_zero() && retry_after <= within,
                "retry after {retry_after:?}, expected at most {within:?}"
            );
        }
        other => panic!(
            "expected the {} limit to refuse, got {other:?}",
            cap.label()
        ),
    }
}

async fn issue(tokens: &Arc<dyn TokenStore>, scope: &Scope, ttl: Duration) -> IssuedToken {
    tokens
        .issue_token(scope, ttl)
        .await
        .expect("issued under the limits")
}

async fn consume(tokens: &Arc<dyn TokenStore>, scope: &Scope, token: &IssuedToken) -> Consumption {
    tokens
        .consume_token(scope, &token.token)
        .await
        .expect("consume")
}

pub(crate) async fn a_scope_holds_at_most_its_limit_of_unspent_tokens(stores: Stores) {
    const LONG: Duration = Duration::from_secs(60);
    // The store-wide limit as high as it goes: other tests' tokens share these tables.
    let tokens = (stores.limited_tokens)(limits(3, TOKENS_TOTAL_CEILING)).await;
    let scope = scope();
    // Long enough that a loaded CI machine, whose SQL issues queue on one row, still finds it
    // unspent at the first refusal below (600 ms once expired first under load).
    const SHORT: Duration = Duration::from_secs(5);
    let short = issue(&tokens, &scope, SHORT).await;
    let mut held = vec![
        issue(&tokens, &scope, LONG).await,
        issue(&tokens, &scope, LONG).await,
    ];
    // Full: the wait is until the earliest unspent token expires, the short one.
    assert_full(
        tokens.issue_token(&scope, LONG).await,
        TokenCap::Scope,
        SHORT,
    );
    let other_scope = Scope::new(&unique("tenant"), scope.operation()).expect("scope");
    let elsewhere = issue(&tokens, &other_scope, LONG).await;

    // A spent token frees its place at once, and is still told from a forgery.
    assert_eq!(
        consume(&tokens, &scope, &held[0]).await,
        Consumption::Consumed
    );
    let spent = held.remove(0);
    held.push(issue(&tokens, &scope, LONG).await);
    assert_full(
        tokens.issue_token(&scope, LONG).await,
        TokenCap::Scope,
        LONG,
    );
    assert_eq!(
        consume(&tokens, &scope, &spent).await,
        Consumption::AlreadyConsumed
    );

    // An expired one frees its place when it expires.
    tokio::time::sleep(SHORT + Duration::from_millis(200)).await;
    assert_eq!(
        consume(&tokens, &scope, &short).await,
        Consumption::Unknown,
        "expired"
    );
    held.push(issue(&tokens, &scope, LONG).await);
    assert_full(
        tokens.issue_token(&scope, LONG).await,
        TokenCap::Scope,
        LONG,
    );

    // Every token issued under the limit is good, once.
    for token in &held {
        assert_eq!(consume(&tokens, &scope, token).await, Consumption::Consumed);
    }
    assert_eq!(
        consume(&tokens, &other_scope, &elsewhere).await,
        Consumption::Consumed
    );
}

pub(crate) async fn a_store_holds_at_most_its_limit_of_unspent_tokens_in_all(stores: Stores) {
    const LONG: Duration = Duration::from_secs(60);
    let tokens = (stores.isolated_tokens)(limits(2, 3)).await;
    let (first, second, third) = (scope(), scope(), scope());
    let mut held = vec![
        (first.clone(), issue(&tokens, &first, LONG).await),
        (first.clone(), issue(&tokens, &first, LONG).await),
    ];
    assert_full(
        tokens.issue_token(&first, LONG).await,
        TokenCap::Scope,
        LONG,
    );
    held.push((second.clone(), issue(&tokens, &second, LONG).await));
    // Three unspent in all: every scope is refused now, also one with none of them.
    assert_full(
        tokens.issue_token(&second, LONG).await,
        TokenCap::Total,
        LONG,
    );
    assert_full(
        tokens.issue_token(&third, LONG).await,
        TokenCap::Total,
        LONG,
    );

    let (scope_of_spent, spent) = held.remove(0);
    assert_eq!(
        consume(&tokens, &scope_of_spent, &spent).await,
        Consumption::Consumed
    );
    held.push((third.clone(), issue(&tokens, &third, LONG).await));
    assert_full(
        tokens.issue_token(&third, LONG).await,
        TokenCap::Total,
        LONG,
    );
    for (scope, token) in &held {
        assert_eq!(consume(&tokens, scope, token).await, Consumption::Consumed);
    }
}

/// Of `TASKS` concurrent issues, how many were issued; every other one must be refused by
/// `cap`, with a wait of at most a token's 60 s lifetime and the race's own length: an issuer
/// reads the clock before its turn, so a token issued meanwhile may expire a little more than
/// a lifetime after that reading (seen: 60.001 s on Redis).
fn issued_among(outcomes: Vec<Result<IssuedToken, IssueError>>, cap: TokenCap) -> usize {
    let mut issued = 0;
    for outcome in outcomes {
        match outcome {
            Ok(_) => issued += 1,
            other => assert_full(other, cap, Duration::from_secs(65)),
        }
    }
    issued
}

pub(crate) async fn concurrent_issues_at_a_limit_never_pass_it(stores: Stores) {
    const HELD: u32 = 8;
    let ttl = Duration::from_secs(60);

    // One scope, many issuers at once, twice: at its limit, then after every token was spent.
    let tokens = (stores.limited_tokens)(limits(HELD, TOKENS_TOTAL_CEILING)).await;
    let one_scope = scope();
    for round in 0..2 {
        let outcomes = race(TASKS, |_| {
            let (tokens, one_scope) = (tokens.clone(), one_scope.clone());
            async move { tokens.issue_token(&one_scope, ttl).await }
        })
        .await;
        let issued: Vec<IssuedToken> = outcomes
            .iter()
            .filter_map(|outcome| outcome.as_ref().ok().cloned())
            .collect();
        assert_eq!(
            issued_among(outcomes, TokenCap::Scope),
            HELD as usize,
            "round {round}: exactly the scope's limit of {TASKS} concurrent issues"
        );
        for token in &issued {
            assert_eq!(
                consume(&tokens, &one_scope, token).await,
                Consumption::Consumed
            );
        }
    }

    // Many scopes, one issuer each, at once: the store-wide limit.
    let tokens = (stores.isolated_tokens)(limits(HELD, HELD)).await;
    let outcomes = race(TASKS, |_| {
        let tokens = tokens.clone();
        async move { tokens.issue_token(&scope(), ttl).await }
    })
    .await;
    assert_eq!(
        issued_among(outcomes, TokenCap::Total),
        HELD as usize,
        "exactly the store's limit of {TASKS} concurrent issues in as many scopes"
    );
}
