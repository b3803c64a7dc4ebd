//! The toolkit's metric families: their names, and [`describe`], which tells the process's
//! metrics recorder what each one counts and in which unit, so that an exporter writes them
//! (Prometheus: `# HELP`). An application calls it once, after installing its recorder.

use metrics::Unit;

/// Commits whose outcome the store could not learn (the connection failed during `COMMIT`),
/// per `backend`.
pub const COMMIT_OUTCOME_UNKNOWN: &str = "mideng_commit_outcome_unknown_total";
/// Writes refused by the durability fence (a primary that lost its synchronous standby), per
/// `backend`.
pub const DURABILITY_FENCES: &str = "mideng_durability_fences_total";
/// Rebuilds of the Redis Cluster client after the cluster changed, per `outcome`.
pub const REDIS_CLUSTER_REBUILDS: &str = "mideng_redis_cluster_rebuilds_total";
/// Outbox messages parked after their last failed publication, per `publisher`.
pub const OUTBOX_PARKED: &str = "mideng_outbox_parked_total";
/// The idempotency layer's decisions, per `operation` and `decision`.
pub const DECISIONS_COUNTER: &str = "mideng_idempotency_decisions_total";
/// How long the idempotency layer took per request, per `operation` and `decision`.
pub const REQUEST_DURATION_HISTOGRAM: &str = "mideng_idempotency_request_duration_seconds";
/// Each store and broker operation, per `backend` and `op`.
pub use crate::latency::STORE_DURATION_HISTOGRAM;

/// Describes every metric family of the toolkit to the installed recorder (none installed:
/// nothing happens). Idempotent.
pub fn describe() {
    metrics::describe_counter!(
        COMMIT_OUTCOME_UNKNOWN,
        Unit::Count,
        "Commits whose outcome the store could not learn: the connection failed while COMMIT \
         was in flight; the caller's retry settles them"
    );
    metrics::describe_counter!(
        DURABILITY_FENCES,
        Unit::Count,
        "Writes refused because the database could not promise durability (no synchronous \
         standby)"
    );
    metrics::describe_counter!(
        REDIS_CLUSTER_REBUILDS,
        Unit::Count,
        "Rebuilds of the Redis Cluster client after the cluster's topology changed, by outcome"
    );
    metrics::describe_counter!(
        OUTBOX_PARKED,
        Unit::Count,
        "Outbox messages parked after their last failed publication, by publisher"
    );
    metrics::describe_counter!(
        DECISIONS_COUNTER,
        Unit::Count,
        "Decisions of the Idempotency-Key layer (executed, replayed, refused, ...) by operation"
    );
    metrics::describe_histogram!(
        REQUEST_DURATION_HISTOGRAM,
        Unit::Seconds,
        "Time from the Idempotency-Key layer receiving a request to its decision's answer, by \
         operation and decision"
    );
    metrics::describe_histogram!(
        STORE_DURATION_HISTOGRAM,
        Unit::Seconds,
        "Each store and broker operation as its caller waits for it, by backend and operation"
    );
}
