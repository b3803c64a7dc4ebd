//! The refund and reversal scripts: what real clients do to the refunds of a paid payment and to
//! the deductions of a wallet, with the duplicates they produce.
//!
//! A share of the payments the buyer paid become refund candidates; the refund script takes
//! one once the service has it PAID, and runs one of:
//! - **one refund**, full or partial, sent the ways a client duplicates it: twice at once to two
//!   instances, or a first attempt that gives up after a few milliseconds and is retried with
//!   the same key on another instance; and sometimes replayed on another instance long after
//!   its answer;
//! - **partial refunds racing**: two or three refunds under distinct keys at once, each above
//!   half the payment, so that together they exceed it: the ones that fit go through, the rest
//!   are refused with `refund-exceeds-payment`;
//! - **a full refund after partials**: a partial refund, then the whole amount under a new key
//!   (refused: part of it is gone), then what the payment says is left;
//! - **a key reused with another amount**: a client's bug, refused with 422, never a second
//!   refund.
//!
//! A share of the answered deductions are put back: the same reversal twice at once, to two
//! instances, and sometimes again long after its answer. A reversal carries no
//! `Idempotency-Key`; one reversal per deduction is the service's own rule, and every answer
//! must repeat the first byte for byte.

use std::time::Duration;

use serde_json::{Value, json};

use super::clients::{Pending, PendingKind, Shared, keyed_at};

/// Most payments waiting for the refund script: a long storm pays more than it refunds.
pub(super) const REFUND_CANDIDATES_MAX: usize = 512;

/// How often the refund script looks at a candidate that is not PAID yet (its notify is
/// delayed or dropped, reconciliation has not found it yet) before leaving it alone.
const CANDIDATE_LOOKS_MAX: u8 = 8;

/// How long a client waits for any answer of the refund scripts but a timeout's first attempt.
const ANSWER_WAIT: Duration = Duration::from_secs(20);

/// Attempts of one request before it is left to quiescence.
const ATTEMPTS: usize = 8;

/// A payment the buyer paid, to be refunded once the service has it PAID.
#[derive(Clone, Debug)]
pub(super) struct RefundCandidate {
    pub(super) tenant: usize,
    pub(super) payment_no: String,
    pub(super) amount_fen: i64,
    /// How often the refund script found it not PAID yet.
    pub(super) looks: u8,
}

/// Refunds one candidate, if one is PAID by now; `false` when there was nothing to refund (the
/// caller's client does something else).
pub(super) async fn refund_script(shared: &Shared, rng: &mut fastrand::Rng, n: u64) -> bool {
    let Some(mut candidate) = shared.log().refund_candidates.pop_front() else {
        return false;
    };
    let view = payment_view(shared, rng, &candidate).await;
    match view["status"].as_str() {
        Some("PAID") => {}
        // Not settled yet, or no answer now (an instance down): later.
        Some("PENDING") | None if candidate.looks < CANDIDATE_LOOKS_MAX => {
            candidate.looks += 1;
            shared.log().refund_candidates.push_back(candidate);
            return false;
        }
        _ => return false,
    }
    let key = |part: &str| format!("{}-rf-{n}-{part}", shared.run);
    let amount = candidate.amount_fen;
    match rng.u8(..10) {
        0..4 => {
            let asked = if amount < 2 || rng.bool() {
                amount
            } else {
                rng.i64(1..amount)
            };
            let request = refund_request(&candidate, key("one"), asked);
            refund_with_duplicates(shared, rng, request).await;
        }
        4..7 if amount >= 2 => {
            shared.count("partial refunds racing past the amount");
            // Each above half the payment: any two exceed it.
            let mut part = |name: &str| {
                let asked = rng.i64(amount / 2 + 1..=amount);
                refund_request(&candidate, key(name), asked)
            };
            let (first, second, third) = (part("a"), part("b"), part("c"));
            let three = rng.bool();
            let instance = rng.usize(..shared.bases.len());
            let mut rngs = [rng.u64(..), rng.u64(..), rng.u64(..)].map(fastrand::Rng::with_seed);
            let [one, two, other] = &mut rngs;
            let _ = tokio::join!(
                keyed_at(shared, one, first, None, ANSWER_WAIT, ATTEMPTS, instance),
                keyed_at(
                    shared,
                    two,
                    second,
                    None,
                    ANSWER_WAIT,
                    ATTEMPTS,
                    instance + 1
                ),
                async {
                    if three {
                        keyed_at(
                            shared,
                            other,
                            third,
                            None,
                            ANSWER_WAIT,
                            ATTEMPTS,
                            instance + 2,
                        )
                        .await;
                    }
                }
            );
        }
        7..9 if amount >= 2 => {
            shared.count("full refund after partials");
            let partial = rng.i64(1..amount);
            let first = refund_request(&candidate, key("part"), partial);
            refund_with_duplicates(shared, rng, first).await;
            // The whole amount, as if nothing had been refunded: more than is left.
            let whole = refund_request(&candidate, key("whole"), amount);
            let instance = rng.usize(..shared.bases.len());
            keyed_at(shared, rng, whole, None, ANSWER_WAIT, ATTEMPTS, instance).await;
            // What the payment says is left.
            let left = payment_view(shared, rng, &candidate).await["refundable"]
                .as_i64()
                .unwrap_or(0);
            if left > 0 {
                let rest = refund_request(&candidate, key("rest"), left);
                refund_with_duplicates(shared, rng, rest).await;
            }
        }
        _ => {
            shared.count("refund key reused with another amount");
            let asked = if amount < 2 {
                amount
            } else {
                rng.i64(1..amount)
            };
            let first = refund_request(&candidate, key("reused"), asked);
            refund_with_duplicates(shared, rng, first.clone()).await;
            // Another body under the same key: its own label, since its answer (422) is not
            // the key's first answer.
            let other = asked + 1;
            let reused = Pending {
                label: format!("{}/amount-{other}", first.label),
                body: refund_body(other),
                kind: PendingKind::Refund {
                    payment_no: candidate.payment_no.clone(),
                    amount: other,
                },
                ..first
            };
            let instance = rng.usize(..shared.bases.len());
            keyed_at(shared, rng, reused, None, ANSWER_WAIT, ATTEMPTS, instance).await;
        }
    }
    true
}

/// A refund's body: the reason is the same for every refund, so that one key's requests differ
/// by their amount only.
fn refund_body(amount: i64) -> Value {
    json!({"amount": amount, "reason": "storm refund"})
}

/// A refund of `candidate` under the request key `key`.
fn refund_request(candidate: &RefundCandidate, key: String, amount: i64) -> Pending {
    Pending {
        label: format!("refund/{}/{key}", candidate.tenant),
        tenant: candidate.tenant,
        path: format!("/v1/payments/{}/refunds", candidate.payment_no),
        body: refund_body(amount),
        key,
        token_needed: false,
        kind: PendingKind::Refund {
            payment_no: candidate.payment_no.clone(),
            amount,
        },
    }
}

/// The payment as the service shows it (`Null` without an answer).
async fn payment_view(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    candidate: &RefundCandidate,
) -> Value {
    shared
        .send(
            rng.usize(..shared.bases.len()),
            candidate.tenant,
            reqwest::Method::GET,
            &format!("/v1/payments/{}", candidate.payment_no),
            None,
            &[],
            Duration::from_secs(10),
        )
        .await
        .filter(|answer| answer.status == 200)
        .map_or(Value::Null, |answer| answer.json())
}

/// A refund sent the way this client duplicates it: twice at once to two instances, or with
/// a first attempt that gives up after a few milliseconds, or once; then sometimes replayed
/// on another instance.
async fn refund_with_duplicates(shared: &Shared, rng: &mut fastrand::Rng, request: Pending) {
    let instance = rng.usize(..shared.bases.len());
    match rng.u8(..10) {
        0..3 => {
            shared.count("refund sent twice at once");
            if shared.bases.len() > 1 {
                shared.count("refund sent to two instances");
            }
            let mut other = fastrand::Rng::with_seed(rng.u64(..));
            let _ = tokio::join!(
                keyed_at(
                    shared,
                    rng,
                    request.clone(),
                    None,
                    ANSWER_WAIT,
                    ATTEMPTS,
                    instance
                ),
                keyed_at(
                    shared,
                    &mut other,
                    request.clone(),
                    None,
                    ANSWER_WAIT,
                    ATTEMPTS,
                    instance + 1
                )
            );
        }
        3..5 => {
            shared.count("refund retried after a client timeout");
            let timeout = Duration::from_millis(rng.u64(1..30));
            let request = request.clone();
            keyed_at(shared, rng, request, None, timeout, ATTEMPTS, instance).await;
        }
        _ => {
            let request = request.clone();
            keyed_at(shared, rng, request, None, ANSWER_WAIT, ATTEMPTS, instance).await;
        }
    }
    if rng.u8(..10) < 3 {
        // The same request again, long after its answer, on another instance.
        shared.count("refund replayed on another instance");
        keyed_at(
            shared,
            rng,
            request,
            None,
            ANSWER_WAIT,
            ATTEMPTS,
            instance + 1,
        )
        .await;
    }
}

/// Puts the deduction `deduction_no` back: twice at once (to two instances when there are
/// several), and sometimes once more long after.
pub(super) async fn reverse_script(
    shared: &Shared,
    rng: &mut fastrand::Rng,
    tenant: usize,
    user: &str,
    deduction_no: &str,
) {
    let request = Pending {
        label: format!("reverse/{tenant}/{deduction_no}"),
        tenant,
        path: format!("/v1/wallets/{user}/deductions/{deduction_no}/reverse"),
        body: json!({}),
        key: deduction_no.to_owned(),
        token_needed: false,
        kind: PendingKind::Reversal {
            user: user.to_owned(),
            deduction_no: deduction_no.to_owned(),
        },
    };
    shared.count("reversal sent twice at once");
    if shared.bases.len() > 1 {
        shared.count("reversal sent to two instances");
    }
    let instance = rng.usize(..shared.bases.len());
    let mut other = fastrand::Rng::with_seed(rng.u64(..));
    let _ = tokio::join!(
        keyed_at(
            shared,
            rng,
            request.clone(),
            None,
            ANSWER_WAIT,
            ATTEMPTS,
            instance
        ),
        keyed_at(
            shared,
            &mut other,
            request.clone(),
            None,
            ANSWER_WAIT,
            ATTEMPTS,
            instance + 1
        )
    );
    if rng.u8(..10) < 3 {
        shared.count("reversal replayed");
        keyed_at(
            shared,
            rng,
            request,
            None,
            ANSWER_WAIT,
            ATTEMPTS,
            instance + 1,
        )
        .await;
    }
}
