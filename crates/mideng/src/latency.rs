//! How long the stores and brokers take: every store operation of the toolkit (a record's
//! `begin`, a token's consumption, one attempt at a lock, a publish to a broker, …) is timed
//! as its caller waits for it, into the histogram `mideng_store_duration_seconds{backend, op}`
//! through the `metrics` facade (any recorder: Prometheus, StatsD, …; without one nothing is
//! kept).
//!
//! One observation is one operation as its caller sees it, from its first poll until it
//! returns: the wait for a pooled connection, every statement or command it sends, the retries
//! of a transient conflict, a broker's confirmation. Failures are observed like successes (the
//! caller waited as long). An operation dropped before it returns (a caller's timeout) is
//! observed with the time until then, so a stalled store shows up at the timeout instead of
//! vanishing from the histogram. Operations that make no round trip are not observed (Redis'
//! purges, which leave expiry to Redis).
//!
//! Labels are bounded on purpose: `backend` is a [`Backend`], `op` a `&'static str` — the
//! toolkit's own are the constants in [`op`]; an application that times its own storage calls
//! with [`StoreTimer`] names them with constants too, never with a value from a request.

use std::time::Instant;

/// Name of the round-trip histogram.
pub const STORE_DURATION_HISTOGRAM: &str = "mideng_store_duration_seconds";

/// What answered: the `backend` label.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum Backend {
    /// The in-process store.
    Memory,
    /// SQLite.
    Sqlite,
    /// PostgreSQL.
    Postgres,
    /// MySQL or MariaDB.
    MySql,
    /// Redis (a single node or a cluster).
    Redis,
    /// RabbitMQ.
    RabbitMq,
    /// NATS JetStream.
    Nats,
}

impl Backend {
    /// The label value.
    pub const fn label(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Sqlite => "sqlite",
            Backend::Postgres => "postgres",
            Backend::MySql => "mysql",
            Backend::Redis => "redis",
            Backend::RabbitMq => "rabbitmq",
            Backend::Nats => "nats",
        }
    }

    /// The backend of a SQL dialect ([`crate::store::sql::Dialect::KIND`]).
    #[cfg(feature = "_sql")]
    pub const fn of_dialect(kind: crate::store::sql::SqlDialect) -> Self {
        match kind {
            crate::store::sql::SqlDialect::Postgres => Backend::Postgres,
            crate::store::sql::SqlDialect::MySql => Backend::MySql,
            crate::store::sql::SqlDialect::Sqlite => Backend::Sqlite,
        }
    }
}

/// The toolkit's operations: the values of the `op` label.
pub mod op {
    /// `RecordStore::begin`, and `SqlStore::begin_in` in the caller's transaction.
    pub const RECORD_BEGIN: &str = "record_begin";
    /// `RecordStore::complete`, and `SqlStore::complete_in` in the caller's transaction.
    pub const RECORD_COMPLETE: &str = "record_complete";
    /// `RecordStore::abandon`.
    pub const RECORD_ABANDON: &str = "record_abandon";
    /// `RecordStore::find_record`.
    pub const RECORD_FIND: &str = "record_find";
    /// `RecordStore::purge_expired`, one batch.
    pub const RECORD_PURGE: &str = "record_purge";
    /// `TokenStore::issue_token`.
    pub const TOKEN_ISSUE: &str = "token_issue";
    /// `TokenStore::consume_token`.
    pub const TOKEN_CONSUME: &str = "token_consume";
    /// `TokenStore::purge_expired_tokens`, one batch.
    pub const TOKEN_PURGE: &str = "token_purge";
    /// `LockStore::try_acquire`: one attempt (`acquire` makes one per poll).
    pub const LOCK_ACQUIRE: &str = "lock_acquire";
    /// `LockStore::release`.
    pub const LOCK_RELEASE: &str = "lock_release";
    /// `LockStore::renew`.
    pub const LOCK_RENEW: &str = "lock_renew";
    /// `LockStore::purge_expired_locks`.
    pub const LOCK_PURGE: &str = "lock_purge";
    /// `StateStore::create_entity`.
    pub const STATE_CREATE: &str = "state_create";
    /// `StateStore::find_state`.
    pub const STATE_FIND: &str = "state_find";
    /// `StateStore::compare_and_set`.
    pub const STATE_TRANSITION: &str = "state_transition";
    /// `outbox::sql::enqueue_in`, in the caller's transaction.
    pub const OUTBOX_ENQUEUE: &str = "outbox_enqueue";
    /// A relay claiming a batch of due outbox rows.
    pub const OUTBOX_CLAIM: &str = "outbox_claim";
    /// A relay marking one published row sent.
    pub const OUTBOX_MARK_SENT: &str = "outbox_mark_sent";
    /// A relay putting one unpublished row back for later.
    pub const OUTBOX_DEFER: &str = "outbox_defer";
    /// `outbox::sql::purge_sent`, one batch.
    pub const OUTBOX_PURGE: &str = "outbox_purge";
    /// `outbox::sql::backlog`.
    pub const OUTBOX_BACKLOG: &str = "outbox_backlog";
    /// `Publisher::publish`: one message, until the broker confirmed or refused it (the
    /// in-database queue: its insert).
    pub const PUBLISH: &str = "publish";
    /// A subscriber of the in-database queue claiming due messages.
    pub const QUEUE_CLAIM: &str = "queue_claim";
    /// `SqlQueue::depth`.
    pub const QUEUE_DEPTH: &str = "queue_depth";
    /// Acknowledging one delivery.
    pub const DELIVERY_ACK: &str = "delivery_ack";
    /// Handing one delivery back for redelivery.
    pub const DELIVERY_RETRY: &str = "delivery_retry";
}

/// Times one store operation: observed into [`STORE_DURATION_HISTOGRAM`] when dropped, so
/// that every way out of the operation (a return, `?`, a caller dropping the future) ends the
/// measurement. Create it at the top of the operation and keep it in a named binding
/// (`let _timer = …`; `let _ = …` would drop it at once).
#[must_use = "the operation is timed until the timer is dropped"]
#[derive(Debug)]
pub struct StoreTimer {
    backend: Backend,
    op: &'static str,
    started: Instant,
}

impl StoreTimer {
    /// Starts timing `op` on `backend`.
    pub fn start(backend: Backend, op: &'static str) -> Self {
        Self {
            backend,
            op,
            started: Instant::now(),
        }
    }
}

impl Drop for StoreTimer {
    fn drop(&mut self) {
        metrics::histogram!(
            STORE_DURATION_HISTOGRAM,
            "backend" => self.backend.label(),
            "op" => self.op
        )
        .record(self.started.elapsed());
    }
}

#[cfg(test)]
mod tests {
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};

    use super::*;

    #[test]
    fn a_dropped_timer_is_one_observation_under_its_labels() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        metrics::with_local_recorder(&recorder, || {
            let _timer = StoreTimer::start(Backend::Redis, op::TOKEN_CONSUME);
        });
        let observed: Vec<_> = snapshotter
            .snapshot()
            .into_vec()
            .into_iter()
            .filter(|(key, _, _, _)| key.key().name() == STORE_DURATION_HISTOGRAM)
            .collect();
        assert_eq!(observed.len(), 1);
        let (key, _, _, value) = &observed[0];
        let labels: Vec<(&str, &str)> = key
            .key()
            .labels()
            .map(|label| (label.key(), label.value()))
            .collect();
        assert_eq!(labels, [("backend", "redis"), ("op", "token_consume")]);
        assert!(matches!(value, DebugValue::Histogram(values) if values.len() == 1));
    }

    #[test]
    fn every_backend_has_a_label_of_its_own() {
        let all = [
            Backend::Memory,
            Backend::Sqlite,
            Backend::Postgres,
            Backend::MySql,
            Backend::Redis,
            Backend::RabbitMq,
            Backend::Nats,
        ];
        let labels: std::collections::HashSet<_> =
            all.iter().map(|backend| backend.label()).collect();
        assert_eq!(labels.len(), all.len());
    }
}
