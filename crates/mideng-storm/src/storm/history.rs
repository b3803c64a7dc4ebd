//! The clients' history, for the audit's history check ([`crate::audit::history`]): every
//! attempt of every keyed request, with when it was sent, when it ended and what it came to,
//! grouped into one operation per request key.

use serde_json::Value;

use super::clients::{Answer, Pending, PendingKind, Shared};
use crate::audit::history::{Attempt, OpKind, Operation, Outcome};

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

impl Shared {
    /// Records one attempt of `pending`, sent at `invoked_ms` (since the run began) and ended
    /// now with `answer`.
    pub(super) fn attempted(&self, pending: &Pending, invoked_ms: u64, answer: Option<&Answer>) {
        let attempt = Attempt {
            invoked_ms,
            completed_ms: self.elapsed_ms(),
            outcome: outcome(answer),
        };
        let tenant = self.tenants[pending.tenant % self.tenants.len()].id.clone();
        let mut log = self.log();
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

    /// Milliseconds since the run's clients began.
    pub(super) fn elapsed_ms(&self) -> u64 {
        u64::try_from(self.started.elapsed().as_millis()).unwrap_or(u64::MAX)
    }
}
