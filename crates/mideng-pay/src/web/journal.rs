//! The console's memory of recent decisions: a `tracing` layer that keeps, in process and
//! bounded, what every idempotency layer decided.
//!
//! Every decision is already an event: the toolkit's HTTP layer logs each one on target
//! `mideng::idempotency` (field `decision`: `token_*` for the token guard, `replay`,
//! `in_flight`, `mismatch`, … for the key), the flows log theirs on `mideng::decision`
//! (fields `layer`, `operation`, `subject`, `outcome`: lock, constraint, CAS, dedup,
//! reconciliation, signature), and every reconciliation round is one event on
//! `mideng::reconcile`. The journal listens to those three targets only (a per-layer filter,
//! so the terminal's log level does not hide them from it) and keeps:
//!
//! - the total per layer and outcome since start (at most [`OUTCOMES_MAX`] pairs);
//! - per [`BUCKET_MS`] interval, what each layer *caught* (a duplicate stopped, a race
//!   decided, a charge repaired), for the last [`BUCKETS_MAX`] intervals;
//! - the last [`RECENT_MAX`] decisions with their reasons;
//! - the last [`ROUNDS_MAX`] reconciliation rounds.
//!
//! Keys and tokens never reach it: the toolkit logs only their redacted forms, and the journal
//! keeps the redacted key as the decision's subject.
//!
//! It is one process's view: each instance of a deployment has its own. The counters of every
//! instance are the Prometheus metrics.

use std::collections::{BTreeMap, VecDeque};
use std::fmt::Debug;
use std::sync::{Arc, Mutex, PoisonError};

use serde::Serialize;
use tracing::field::{Field, Visit};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::filter::{FilterFn, Filtered};
use tracing_subscriber::layer::Context;

/// Width of one interval of the time series.
pub const BUCKET_MS: i64 = 5_000;
/// Intervals kept (15 minutes).
pub const BUCKETS_MAX: usize = 180;
/// Recent decisions kept.
pub const RECENT_MAX: usize = 100;
/// Reconciliation rounds kept.
pub const ROUNDS_MAX: usize = 20;
/// Distinct (layer, outcome) pairs counted; the names come from the code, so this is a guard,
/// not a limit anyone should meet.
pub const OUTCOMES_MAX: usize = 256;
/// Longest text kept of one field.
const FIELD_CHARS_MAX: usize = 96;

/// Outcomes that let a request through rather than catch something, whatever the layer.
const PASSED: &[&str] = &[
    "proceed",
    "proceed_takeover",
    "stored",
    "abandoned",
    "no_key",
    "token_consumed",
    "token_degraded",
    "created",
    "inserted",
    "reserved",
    "acquired",
    "off",
    "applied",
    "closed",
    "paid",
    "granted",
    "revoked",
    "refund_success",
    "refund_settled",
    "refund_unchanged",
    "nothing_to_grant",
    "nothing_to_revoke",
];

/// Whether `outcome` of `layer` is a catch: a duplicate answered, refused or waited for, a race
/// decided, a forgery refused, a charge repaired. A first effect going through is not.
pub fn is_catch(layer: &str, outcome: &str) -> bool {
    match layer {
        // What reconciliation repairs is its catch; a payment left as it was is not.
        "reconciliation" => !matches!(outcome, "left_pending" | "unknown" | "busy"),
        _ => !PASSED.contains(&outcome),
    }
}

/// The layer an event of the toolkit's HTTP layer belongs to, by its decision.
fn http_layer(decision: &str) -> &'static str {
    if decision.starts_with("token_") {
        "token"
    } else {
        "key"
    }
}

/// One decision, as the console lists it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Decision {
    /// When, in Unix milliseconds.
    pub at_ms: i64,
    /// The layer: `token`, `key`, `lock`, `constraint`, `cas`, `dedup`, `reconciliation`,
    /// `signature`.
    pub layer: String,
    /// The operation (`payments.create`, `notify.alipay`, …).
    pub operation: String,
    /// What was decided (`replay`, `existing_pending`, `busy`, …).
    pub outcome: String,
    /// What it was about: an order, a payment, a notify id, or a redacted key.
    pub subject: String,
    /// The tenant, when there is one.
    pub tenant: String,
    /// Whether it caught something ([`is_catch`]).
    pub caught: bool,
}

/// One reconciliation round.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Round {
    /// When, in Unix milliseconds.
    pub at_ms: i64,
    /// The round's figures by name (`examined`, `paid`, `closed`, …).
    pub figures: BTreeMap<String, u64>,
}

/// What each layer caught in one interval.
#[derive(Clone, Debug, PartialEq, Eq, Serialize)]
pub struct Bucket {
    /// Start of the interval, Unix milliseconds (a multiple of [`BUCKET_MS`]).
    pub start_ms: i64,
    /// Catches per layer.
    pub caught: BTreeMap<String, u64>,
}

/// A copy of the journal at one moment.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Snapshot {
    /// Since when (Unix milliseconds) the journal counts.
    pub since_ms: i64,
    /// Totals: layer → outcome → count.
    pub totals: BTreeMap<String, BTreeMap<String, u64>>,
    /// Catches per layer since start.
    pub caught: BTreeMap<String, u64>,
    /// Catches per layer and interval, oldest first.
    pub series: Vec<Bucket>,
    /// The latest decisions, newest first.
    pub recent: Vec<Decision>,
    /// The latest reconciliation rounds, newest first.
    pub rounds: Vec<Round>,
}

#[derive(Default)]
struct State {
    since_ms: i64,
    totals: BTreeMap<(String, String), u64>,
    series: VecDeque<Bucket>,
    recent: VecDeque<Decision>,
    rounds: VecDeque<Round>,
}

/// The journal; clones share it.
#[derive(Clone, Default)]
pub struct Journal {
    state: Arc<Mutex<State>>,
}

impl Debug for Journal {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        formatter.write_str("Journal")
    }
}

impl Journal {
    /// An empty journal counting from `now_ms`.
    pub fn new(now_ms: i64) -> Self {
        let journal = Self::default();
        journal.lock().since_ms = now_ms;
        journal
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        // A panic while holding the lock leaves counters, never a broken invariant.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The `tracing` layer that fills this journal, filtered to the decision targets.
    pub fn layer<S>(&self) -> Filtered<Listener, FilterFn, S>
    where
        S: Subscriber + for<'span> tracing_subscriber::registry::LookupSpan<'span>,
    {
        Listener {
            journal: self.clone(),
        }
        .with_filter(FilterFn::new(|metadata| {
            matches!(
                metadata.target(),
                "mideng::idempotency" | "mideng::decision" | "mideng::reconcile"
            )
        }))
    }

    /// Records a decision made at `at_ms`.
    pub fn record(&self, decision: Decision) {
        let mut state = self.lock();
        let pair = (decision.layer.clone(), decision.outcome.clone());
        if state.totals.len() < OUTCOMES_MAX || state.totals.contains_key(&pair) {
            *state.totals.entry(pair).or_default() += 1;
        }
        if decision.caught {
            let start_ms = decision.at_ms - decision.at_ms.rem_euclid(BUCKET_MS);
            let current = state.series.back().map(|bucket| bucket.start_ms);
            if current.is_none_or(|current| current < start_ms) {
                state.series.push_back(Bucket {
                    start_ms,
                    caught: BTreeMap::new(),
                });
                while state.series.len() > BUCKETS_MAX {
                    state.series.pop_front();
                }
            }
            // A decision stamped a little before the newest interval (threads race to the
            // lock) counts in the interval it belongs to, if that is still kept.
            if let Some(bucket) = state
                .series
                .iter_mut()
                .rev()
                .find(|bucket| bucket.start_ms <= start_ms)
            {
                *bucket.caught.entry(decision.layer.clone()).or_default() += 1;
            }
        }
        state.recent.push_front(decision);
        state.recent.truncate(RECENT_MAX);
    }

    /// Records a reconciliation round.
    pub fn record_round(&self, round: Round) {
        let mut state = self.lock();
        state.rounds.push_front(round);
        state.rounds.truncate(ROUNDS_MAX);
    }

    /// A copy of everything kept.
    pub fn snapshot(&self) -> Snapshot {
        let state = self.lock();
        let mut totals: BTreeMap<String, BTreeMap<String, u64>> = BTreeMap::new();
        let mut caught: BTreeMap<String, u64> = BTreeMap::new();
        for ((layer, outcome), count) in &state.totals {
            totals
                .entry(layer.clone())
                .or_default()
                .insert(outcome.clone(), *count);
            if is_catch(layer, outcome) {
                *caught.entry(layer.clone()).or_default() += count;
            }
        }
        Snapshot {
            since_ms: state.since_ms,
            totals,
            caught,
            series: state.series.iter().cloned().collect(),
            recent: state.recent.iter().cloned().collect(),
            rounds: state.rounds.iter().cloned().collect(),
        }
    }
}

/// The `tracing` layer of a [`Journal`] (see [`Journal::layer`]).
pub struct Listener {
    journal: Journal,
}

impl<S: Subscriber> Layer<S> for Listener {
    fn on_event(&self, event: &Event<'_>, _context: Context<'_, S>) {
        let mut fields = Fields::default();
        event.record(&mut fields);
        let at_ms = mideng::clock::now_ms();
        match event.metadata().target() {
            "mideng::reconcile" => self.journal.record_round(Round {
                at_ms,
                figures: fields.numbers,
            }),
            target => {
                let Some(decision) = fields.decision(target, at_ms) else {
                    return;
                };
                self.journal.record(decision);
            }
        }
    }
}

/// The fields of one event.
#[derive(Default)]
struct Fields {
    text: BTreeMap<&'static str, String>,
    numbers: BTreeMap<String, u64>,
}

impl Fields {
    /// The decision an event describes; `None` for the targets' other events (errors).
    fn decision(mut self, target: &str, at_ms: i64) -> Option<Decision> {
        let (layer, outcome, subject) = if target == "mideng::idempotency" {
            let decision = self.text.remove("decision")?;
            (
                http_layer(&decision).to_owned(),
                decision,
                self.text.remove("key").unwrap_or_default(),
            )
        } else {
            (
                self.text.remove("layer")?,
                self.text.remove("outcome")?,
                self.text.remove("subject").unwrap_or_default(),
            )
        };
        Some(Decision {
            at_ms,
            caught: is_catch(&layer, &outcome),
            layer,
            outcome,
            subject,
            operation: self.text.remove("operation").unwrap_or_default(),
            tenant: self.text.remove("tenant").unwrap_or_default(),
        })
    }

    fn keep(&mut self, field: &Field, value: &str) {
        if matches!(
            field.name(),
            "decision" | "key" | "layer" | "outcome" | "subject" | "operation" | "tenant"
        ) {
            self.text
                .insert(field.name(), value.chars().take(FIELD_CHARS_MAX).collect());
        }
    }
}

impl Visit for Fields {
    fn record_str(&mut self, field: &Field, value: &str) {
        self.keep(field, value);
    }

    fn record_u64(&mut self, field: &Field, value: u64) {
        self.numbers.insert(field.name().to_owned(), value);
    }

    fn record_i64(&mut self, field: &Field, value: i64) {
        self.numbers
            .insert(field.name().to_owned(), u64::try_from(value).unwrap_or(0));
    }

    fn record_debug(&mut self, field: &Field, value: &dyn Debug) {
        // `%value` fields (Display) arrive here too; only the named text fields are kept.
        if field.name() != "message" {
            self.keep(field, &format!("{value:?}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use tracing_subscriber::layer::SubscriberExt;

    use super::*;

    fn decision(at_ms: i64, layer: &str, outcome: &str) -> Decision {
        Decision {
            at_ms,
            layer: layer.to_owned(),
            operation: "payments.create".to_owned(),
            outcome: outcome.to_owned(),
            subject: "o-1".to_owned(),
            tenant: "t".to_owned(),
            caught: is_catch(layer, outcome),
        }
    }

    #[test]
    fn catches_are_counted_per_layer_and_interval_and_everything_is_bounded() {
        let journal = Journal::new(0);
        journal.record(decision(1_000, "key", "replay"));
        journal.record(decision(2_000, "key", "replay"));
        journal.record(decision(2_500, "key", "proceed"));
        journal.record(decision(6_000, "lock", "busy"));
        let snapshot = journal.snapshot();
        assert_eq!(snapshot.totals["key"]["replay"], 2);
        assert_eq!(snapshot.totals["key"]["proceed"], 1);
        assert_eq!(snapshot.caught["key"], 2, "a proceed is not a catch");
        assert_eq!(snapshot.series.len(), 2);
        assert_eq!(snapshot.series[0].start_ms, 0);
        assert_eq!(snapshot.series[0].caught["key"], 2);
        assert_eq!(snapshot.series[1].start_ms, 5_000);
        assert_eq!(snapshot.series[1].caught["lock"], 1);
        assert_eq!(snapshot.recent[0].outcome, "busy", "newest first");
        assert!(is_catch("reconciliation", "paid"), "a repaired charge");
        assert!(!is_catch("dedup", "paid"), "the first notify's effect");
        assert!(!is_catch("reconciliation", "left_pending"));
        assert!(is_catch("dedup", "duplicate") && is_catch("token", "token_duplicate"));

        for index in 0..1_000 {
            journal.record(decision(10_000 + index * BUCKET_MS, "cas", "paid_first"));
        }
        let snapshot = journal.snapshot();
        assert_eq!(snapshot.series.len(), BUCKETS_MAX);
        assert_eq!(snapshot.recent.len(), RECENT_MAX);
        assert_eq!(snapshot.totals["cas"]["paid_first"], 1_000);
    }

    #[test]
    fn the_layer_reads_the_toolkits_and_the_flows_events() {
        let journal = Journal::new(0);
        let subscriber = tracing_subscriber::registry().with(journal.layer());
        tracing::subscriber::with_default(subscriber, || {
            tracing::info!(
                target: "mideng::idempotency",
                tenant = "t", operation = "payments.create", key = "ab…yz", decision = "replay",
                "idempotency decision"
            );
            tracing::warn!(
                target: "mideng::idempotency",
                tenant = "t", operation = "payments.create", key = "cd…wx",
                decision = "token_duplicate", "idempotency decision"
            );
            tracing::info!(
                target: "mideng::decision",
                layer = "constraint", operation = "payments.create", tenant = "t",
                subject = "o-9", outcome = "existing_pending", "idempotency decision"
            );
            tracing::error!(target: "mideng::idempotency", "idempotency store failure");
            tracing::info!(target: "mideng::elsewhere", layer = "cas", outcome = "x", "ignored");
            tracing::info!(
                target: "mideng::reconcile",
                examined = 3_u32, paid = 1_u32, "reconciliation round"
            );
        });
        let snapshot = journal.snapshot();
        assert_eq!(snapshot.caught["key"], 1);
        assert_eq!(snapshot.caught["token"], 1);
        assert_eq!(snapshot.caught["constraint"], 1);
        assert!(
            !snapshot.totals.contains_key("cas"),
            "other targets ignored"
        );
        assert_eq!(snapshot.recent.len(), 3, "the error event is no decision");
        assert_eq!(snapshot.recent[0].subject, "o-9");
        assert_eq!(snapshot.recent[2].subject, "ab…yz");
        assert_eq!(snapshot.rounds[0].figures["examined"], 3);
        assert_eq!(snapshot.rounds[0].figures["paid"], 1);
    }
}
