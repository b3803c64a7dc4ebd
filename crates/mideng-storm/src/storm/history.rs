//! The clients' history, recorded twice from the same attempts: for the audit's history check
//! ([`crate::audit::history`]), every attempt of every keyed request grouped into one
//! operation per request key; and for `--history` and the linearizability check
//! ([`crate::audit::linearizable`]), every attempt and every wallet read as one operation in
//! Jepsen's shape ([`crate::audit::jepsen`]).

use std::sync::atomic::Ordering;

use serde_json::Value;

use super::clients::{Answer, Pending, PendingKind, Shared};
use crate::audit::history::{Attempt, OpKind, Operation, Outcome};
use crate::audit::jepsen::{self, Call, ClientOp, Completion};

/// Nanoseconds in a millisecond: the audit's history counts milliseconds, the file
/// nanoseconds.
const NS_PER_MS: u64 = 1_000_000;

/// What an answer (or its absence) says about the operation's effect.
pub(super) fn outcome(answer: Option<&Answer>) -> Outcome {
    let Some(answer) = answer else {
        return Outcome::Unknown;
    };
    let body = answer.json();
    let code = body["code"].as_str().unwrap_or_default();
    match answer.status {
        // 202: the payment's trade is not confirmed, nothing is stored under the key yet.
        202 => Outcome::Unknown,
        200..=299 => Outcome::Ok {
            number: number_in(&body),
            balance_after: body["balance_after"]
                .as_i64()
                .or_else(|| body["balance"].as_i64()),
        },
        // The business key was taken under another request key: the answer names that effect.
        409 if matches!(code, "already-deducted" | "already-credited") => Outcome::Ok {
            number: number_in(&body["existing"]),
            balance_after: None,
        },
        // About this attempt only (its token, a key in use elsewhere), or no answer at all.
        _ if answer.status >= 500
            || code.starts_with("idempotency-token-")
            || matches!(code, "duplicate-submission" | "in-progress") =>
        {
            Outcome::Unknown
        }
        _ => Outcome::Refused {
            code: code.to_owned(),
        },
    }
}

/// The entry, refund or payment number an answer names (a reversal's answer names the
/// deduction it put back too: its own number first).
fn number_in(view: &Value) -> Option<String> {
    [
        "reversal_no",
        "deduction_no",
        "entry_no",
        "refund_no",
        "payment_no",
    ]
    .into_iter()
    .find_map(|field| view[field].as_str())
    .map(str::to_owned)
}

/// The operation a pending request is an attempt of, without its attempts.
fn operation_of(pending: &Pending, tenant: String) -> Operation {
    let (kind, subject, business_key, amount) = match &pending.kind {
        PendingKind::Credit { user, amount } => {
            (OpKind::Credit, user.clone(), pending.key.clone(), *amount)
        }
        PendingKind::Deduct {
            user,
            order,
            amount,
        } => (OpKind::Deduct, user.clone(), order.clone(), *amount),
        PendingKind::Reversal { user, deduction_no } => {
            (OpKind::Reversal, user.clone(), deduction_no.clone(), 0)
        }
        PendingKind::Refund { payment_no, amount } => (
            OpKind::Refund,
            payment_no.clone(),
            pending.key.clone(),
            *amount,
        ),
        PendingKind::Payment => (OpKind::Payment, String::new(), pending.key.clone(), 0),
    };
    Operation {
        kind,
        tenant,
        subject,
        business_key,
        amount,
        attempts: Vec::new(),
    }
}

/// What an answer (or its absence) was, as the history file says it.
fn completion(answer: Option<&Answer>) -> Completion {
    let Some(answer) = answer else {
        return Completion::Info {
            error: "no-answer".to_owned(),
        };
    };
    let body = answer.json();
    let code = body["code"].as_str().unwrap_or_default();
    let error = if code.is_empty() {
        format!("status-{}", answer.status)
    } else {
        code.to_owned()
    };
    match answer.status {
        // The payment's trade is not confirmed, nothing is stored under the key yet.
        202 => Completion::Info {
            error: "accepted".to_owned(),
        },
        200..=299 => Completion::Ok(jepsen::Answer::of(&body)),
        409 if matches!(code, "already-deducted" | "already-credited") => {
            Completion::Ok(jepsen::Answer {
                existing: Some(Box::new(jepsen::Answer::of(&body["existing"]))),
                ..jepsen::Answer::default()
            })
        }
        _ if outcome(Some(answer)) == Outcome::Unknown => Completion::Info { error },
        _ => Completion::Fail { error },
    }
}

/// What a pending request asks, and the key the history files it under.
fn call_of(pending: &Pending, tenant: &str) -> (Call, String) {
    let idempotency_key = pending.key.clone();
    match &pending.kind {
        PendingKind::Credit { user, amount } => (
            Call::Credit {
                amount: *amount,
                reference: pending.body["reference"]
                    .as_str()
                    .unwrap_or(&pending.key)
                    .to_owned(),
                idempotency_key,
            },
            format!("{tenant}/{user}"),
        ),
        PendingKind::Deduct {
            user,
            order,
            amount,
        } => (
            Call::Deduct {
                amount: *amount,
                order_id: order.clone(),
                idempotency_key,
            },
            format!("{tenant}/{user}"),
        ),
        PendingKind::Reversal { user, deduction_no } => (
            Call::Reverse {
                deduction_no: deduction_no.clone(),
            },
            format!("{tenant}/{user}"),
        ),
        PendingKind::Refund { payment_no, amount } => (
            Call::Refund {
                amount: *amount,
                idempotency_key,
            },
            format!("{tenant}/{payment_no}"),
        ),
        PendingKind::Payment => {
            // The order is in the path the pending request was made with
            // (`/v1/orders/{order_id}/payments`), and nowhere else.
            let order_id = pending
                .path
                .strip_prefix("/v1/orders/")
                .and_then(|rest| rest.strip_suffix("/payments"))
                .unwrap_or_default()
                .to_owned();
            let key = format!("{tenant}/{order_id}");
            (
                Call::CreatePayment {
                    order_id,
                    channel: pending.body["channel"]
                        .as_str()
                        .unwrap_or_default()
                        .to_owned(),
                    idempotency_key,
                },
                key,
            )
        }
    }
}

impl Shared {
    /// Records one attempt of `pending`, sent at `invoked_ns` (since the run began) and ended
    /// now with `answer`.
    pub(super) fn attempted(&self, pending: &Pending, invoked_ns: u64, answer: Option<&Answer>) {
        let completed_ns = self.elapsed_ns();
        let attempt = Attempt {
            invoked_ms: invoked_ns / NS_PER_MS,
            completed_ms: completed_ns / NS_PER_MS,
            outcome: outcome(answer),
        };
        let tenant = self.tenants[pending.tenant % self.tenants.len()].id.clone();
        let (call, key) = call_of(pending, &tenant);
        let op = ClientOp {
            process: self.processes.fetch_add(1, Ordering::Relaxed),
            key,
            invoked_ns,
            completed_ns,
            call,
            completion: completion(answer),
        };
        let mut log = self.log();
        log.client.operations.push(op);
        let index = match log.history_index.get(&pending.label) {
            Some(index) => *index,
            None => {
                let index = log.client.history.len();
                log.client.history.push(operation_of(pending, tenant));
                log.history_index.insert(pending.label.clone(), index);
                index
            }
        };
        if let Some(operation) = log.client.history.get_mut(index) {
            operation.attempts.push(attempt);
        }
    }

    /// Records a read of `user`'s wallet (tenant index `tenant`), sent at `invoked_ns` and
    /// ended now with `answer`.
    pub(super) fn read_recorded(
        &self,
        tenant: usize,
        user: &str,
        invoked_ns: u64,
        answer: Option<&Answer>,
    ) {
        let tenant = &self.tenants[tenant % self.tenants.len()].id;
        let op = ClientOp {
            process: self.processes.fetch_add(1, Ordering::Relaxed),
            key: format!("{tenant}/{user}"),
            invoked_ns,
            completed_ns: self.elapsed_ns(),
            call: Call::Read,
            completion: completion(answer),
        };
        self.log().client.operations.push(op);
    }

    /// Nanoseconds since the run's clients began.
    pub(super) fn elapsed_ns(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_nanos()).unwrap_or(u64::MAX)
    }
}
