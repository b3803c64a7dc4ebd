//! The clients' history as an outsider reads it: every HTTP attempt of the storm's clients as
//! one operation in Jepsen's shape (an `invoke` line, then an `ok`, `fail` or `info` line),
//! which `mideng storm --history PATH` writes as JSON lines and [`super::linearizable`] checks.
//! Pure: the storm's clients build these values (`storm/history.rs`), the storm writes them.
//!
//! The names of the fields and of the operations are a contract with checkers outside this
//! repository (Knossos, Elle, Porcupine adapters): docs/storm.md documents them, and a rename
//! here is a breaking change there.

use serde::Serialize;
use serde_json::{Value, json};

/// One attempt: its process, when it was sent and when it ended (nanoseconds since the run's
/// clients began), what it asked and what it came to.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ClientOp {
    /// One process per attempt: concurrent requests (a double click's two copies included)
    /// never share one, and a process whose attempt ended `info` is never used again, as
    /// Jepsen requires of an operation whose outcome is unknown.
    pub process: u64,
    /// What the operation is about, unique across tenants: `tenant/user` for a wallet,
    /// `tenant/payment_no` for a refund, `tenant/order_id` for a payment's creation.
    pub key: String,
    /// Sent.
    pub invoked_ns: u64,
    /// Answered, or given up on.
    pub completed_ns: u64,
    /// What it asked.
    pub call: Call,
    /// What it came to.
    pub completion: Completion,
}

/// What an operation asks for: Jepsen's `f` and the invocation's `value`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Call {
    /// `POST /v1/wallets/{user}/credit`.
    Credit {
        /// Fen.
        amount: i64,
        /// The credit's business key.
        reference: String,
        /// The request's `Idempotency-Key`.
        idempotency_key: String,
    },
    /// `POST /v1/wallets/{user}/deduct`.
    Deduct {
        /// Fen.
        amount: i64,
        /// The deduct's business key.
        order_id: String,
        /// The request's `Idempotency-Key`.
        idempotency_key: String,
    },
    /// `POST /v1/wallets/{user}/deductions/{deduction_no}/reverse` (no key: one reversal per
    /// deduction is the service's own rule).
    Reverse {
        /// The deduction put back.
        deduction_no: String,
    },
    /// `GET /v1/wallets/{user}`.
    Read,
    /// `POST /v1/orders/{order_id}/payments`.
    CreatePayment {
        /// The order paid.
        order_id: String,
        /// `alipay` or `wechat`.
        channel: String,
        /// The request's `Idempotency-Key`.
        idempotency_key: String,
    },
    /// `POST /v1/payments/{payment_no}/refunds`.
    Refund {
        /// Fen.
        amount: i64,
        /// The request's `Idempotency-Key` (the refund's business key too).
        idempotency_key: String,
    },
}

impl Call {
    /// Jepsen's `f`.
    pub fn f(&self) -> &'static str {
        match self {
            Call::Credit { .. } => "credit",
            Call::Deduct { .. } => "deduct",
            Call::Reverse { .. } => "reverse",
            Call::Read => "read",
            Call::CreatePayment { .. } => "create_payment",
            Call::Refund { .. } => "refund",
        }
    }

    /// The invocation's `value`.
    fn value(&self) -> Value {
        match self {
            Call::Credit {
                amount,
                reference,
                idempotency_key,
            } => {
                json!({"amount": amount, "reference": reference, "idempotency_key": idempotency_key})
            }
            Call::Deduct {
                amount,
                order_id,
                idempotency_key,
            } => {
                json!({"amount": amount, "order_id": order_id, "idempotency_key": idempotency_key})
            }
            Call::Reverse { deduction_no } => json!({"deduction_no": deduction_no}),
            Call::Read => json!({}),
            Call::CreatePayment {
                order_id,
                channel,
                idempotency_key,
            } => {
                json!({"order_id": order_id, "channel": channel, "idempotency_key": idempotency_key})
            }
            Call::Refund {
                amount,
                idempotency_key,
            } => json!({"amount": amount, "idempotency_key": idempotency_key}),
        }
    }
}

/// What an attempt came to: Jepsen's completion `type`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Completion {
    /// A 2xx, or a 409 naming the earlier effect of the same business key (`existing`).
    Ok(Answer),
    /// A final refusal: the operation took no effect; `error` is the problem's `code`.
    Fail {
        /// The problem's `code` (`insufficient-funds`, …).
        error: String,
    },
    /// Indeterminate: no answer, a 5xx, a 202, or a refusal of this attempt only (its token,
    /// its key in progress elsewhere). It may have taken effect, at most once, at any time
    /// after its invocation.
    Info {
        /// Why the outcome is unknown: `no-answer`, `status-503`, the problem's `code`, ….
        error: String,
    },
}

/// The fields of an answer the history keeps; each present only when the answer had it.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Answer {
    /// A deduct's ledger entry (a reversal's answer names the deduction it put back too).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub deduction_no: Option<String>,
    /// A credit's ledger entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub entry_no: Option<String>,
    /// A reversal's ledger entry.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub reversal_no: Option<String>,
    /// A refund's number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub refund_no: Option<String>,
    /// A payment's number.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub payment_no: Option<String>,
    /// A payment's or a refund's status.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub status: Option<String>,
    /// Fen moved.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub amount: Option<i64>,
    /// The balance right after a deduct or a reversal, fen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance_after: Option<i64>,
    /// The balance after a credit, or as read, fen.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub balance: Option<i64>,
    /// A 409's earlier effect of the same business key, as that effect's own answer was.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub existing: Option<Box<Answer>>,
}

impl Answer {
    /// The fields of a view the service answered (unknown fields left out).
    pub fn of(view: &Value) -> Self {
        let text = |field: &str| view[field].as_str().map(str::to_owned);
        Self {
            deduction_no: text("deduction_no"),
            entry_no: text("entry_no"),
            reversal_no: text("reversal_no"),
            refund_no: text("refund_no"),
            payment_no: text("payment_no"),
            status: text("status"),
            amount: view["amount"].as_i64(),
            balance_after: view["balance_after"].as_i64(),
            balance: view["balance"].as_i64(),
            existing: None,
        }
    }
}

/// One line of the history file.
#[derive(Debug, Serialize)]
struct Line<'a> {
    #[serde(rename = "type")]
    kind: &'static str,
    process: u64,
    time: u64,
    f: &'static str,
    key: &'a str,
    value: Value,
    #[serde(skip_serializing_if = "Option::is_none")]
    error: Option<&'a str>,
}

/// The history as JSON lines in time order: each operation's invocation, then its completion
/// (an invocation before a completion of the same nanosecond, so that no operation seems to
/// end before another that began with it). A `fail` or `info` line repeats the invocation's
/// value, as Jepsen's do, with `error` beside it.
pub fn lines(ops: &[ClientOp]) -> Vec<String> {
    let mut events: Vec<(u64, bool, usize)> = Vec::with_capacity(ops.len() * 2);
    for (index, op) in ops.iter().enumerate() {
        events.push((op.invoked_ns, false, index));
        events.push((op.completed_ns.max(op.invoked_ns), true, index));
    }
    events.sort_unstable();
    events
        .into_iter()
        .filter_map(|(time, completion, index)| {
            let op = ops.get(index)?;
            let (kind, value, error) = if !completion {
                ("invoke", op.call.value(), None)
            } else {
                match &op.completion {
                    Completion::Ok(answer) => ("ok", serde_json::to_value(answer).ok()?, None),
                    Completion::Fail { error } => ("fail", op.call.value(), Some(error.as_str())),
                    Completion::Info { error } => ("info", op.call.value(), Some(error.as_str())),
                }
            };
            serde_json::to_string(&Line {
                kind,
                process: op.process,
                time,
                f: op.call.f(),
                key: &op.key,
                value,
                error,
            })
            .ok()
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_attempt_is_an_invocation_then_its_completion_in_time_order() {
        let ops = [
            ClientOp {
                process: 2,
                key: "t1/u".to_owned(),
                invoked_ns: 30,
                completed_ns: 90,
                call: Call::Deduct {
                    amount: 60,
                    order_id: "o1".to_owned(),
                    idempotency_key: "k1".to_owned(),
                },
                completion: Completion::Fail {
                    error: "insufficient-funds".to_owned(),
                },
            },
            ClientOp {
                process: 1,
                key: "t1/u".to_owned(),
                invoked_ns: 10,
                completed_ns: 50,
                call: Call::Read,
                completion: Completion::Ok(Answer {
                    balance: Some(40),
                    ..Answer::default()
                }),
            },
        ];
        let lines: Vec<Value> = lines(&ops)
            .iter()
            .map(|line| serde_json::from_str(line).expect("each line is JSON"))
            .collect();
        let shape: Vec<(&str, u64, u64)> = lines
            .iter()
            .map(|line| {
                (
                    line["type"].as_str().unwrap_or_default(),
                    line["process"].as_u64().unwrap_or_default(),
                    line["time"].as_u64().unwrap_or_default(),
                )
            })
            .collect();
        assert_eq!(
            shape,
            [
                ("invoke", 1, 10),
                ("invoke", 2, 30),
                ("ok", 1, 50),
                ("fail", 2, 90)
            ]
        );
        assert_eq!(lines[0]["f"], "read");
        assert_eq!(lines[0]["value"], json!({}));
        assert_eq!(lines[2]["value"], json!({"balance": 40}));
        assert_eq!(lines[3]["error"], "insufficient-funds");
        assert_eq!(
            lines[3]["value"],
            json!({"amount": 60, "order_id": "o1", "idempotency_key": "k1"})
        );
        assert_eq!(lines[3]["key"], "t1/u");
    }
}
