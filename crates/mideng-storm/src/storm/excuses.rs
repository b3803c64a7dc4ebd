//! Which 5xx a fault excuses: only the answers its kind produces. Pure: a fault kind (as the
//! timeline names it) and an answer's status and problem code in, a yes or no out.
//!
//! A fault makes one dependency unavailable, and the service says which, in the problem's
//! `code`: a database fault gives `database-unavailable` (or the idempotency store's and the
//! stored answer's codes when the records live in the database), a Redis fault the token store's
//! and the lock's, the simulator's faults the channel's. A 5xx whose code no active fault's
//! kind produces is the service's own failure, and the run says so; a 500 never is a fault's.
//!
//! | the fault's kind names | it excuses |
//! |---|---|
//! | the database, PostgreSQL | `database-unavailable`, `idempotency-store-unavailable`, `response-not-stored`, `handler-timeout` |
//! | Redis | `token-store-unavailable`, `database-unavailable` (the order locks), `idempotency-store-unavailable`, `handler-timeout` |
//! | the simulator | `channel-unavailable`, `channel-rejected`, `handler-timeout` |
//! | an instance or a process killed, or paused past its leases | `handler-timeout` (a lock its request held waits out its lease), `service-stopping` (an in-process instance stopped under a request) |
//! | the broker, NATS | nothing: events leave through the outbox, no request waits for them |

/// The longest a fault of `kind` may leave every client without an ok answer (its window and
/// [`super::availability::AFTER_WINDOW_MS`] after it), milliseconds. A PostgreSQL primary
/// lost or cut off waits for Patroni's leader key to expire and HAProxy to follow (13.9 s the
/// longest in the kept HA run); a Redis fault for the cluster's failover and every instance's
/// reconnection (bounded by the fault's own 10 s recovery wait); the rest for reconnections
/// and a retry's back-off.
pub(super) fn unavailability_ceiling_ms(kind: &str) -> u64 {
    match cause(kind) {
        Some(Cause::Database) if kind.contains("PostgreSQL") => 30_000,
        Some(Cause::Redis) => 20_000,
        Some(Cause::Database | Cause::Instance) => 15_000,
        Some(Cause::Channel | Cause::Broker) | None => 10_000,
    }
}

/// What a kind of fault takes away.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Cause {
    Database,
    Redis,
    Channel,
    Instance,
    Broker,
}

/// The cause a kind's name tells, `None` for a kind this table does not know (a fault whose
/// script failed, say): such a window excuses nothing.
fn cause(kind: &str) -> Option<Cause> {
    // Order matters where a name says two things: "Redis … during a PostgreSQL failover" is a
    // compound fault the caller splits; one kind names one dependency.
    if kind.contains("fault not injected") {
        None
    } else if kind.contains("database") || kind.contains("PostgreSQL") {
        Some(Cause::Database)
    } else if kind.contains("Redis") {
        Some(Cause::Redis)
    } else if kind.contains("simulator") || kind.contains("channel") {
        Some(Cause::Channel)
    } else if kind.contains("instance") || kind.contains("process") {
        Some(Cause::Instance)
    } else if kind.contains("broker") || kind.contains("NATS") {
        Some(Cause::Broker)
    } else {
        None
    }
}

/// Whether a fault of `kind` produces an answer of `status` with the problem `code`.
pub(super) fn produces(kind: &str, status: u16, code: &str) -> bool {
    if status == 500 {
        return false;
    }
    let Some(cause) = cause(kind) else {
        return false;
    };
    match cause {
        Cause::Database => matches!(
            code,
            "database-unavailable"
                | "idempotency-store-unavailable"
                | "response-not-stored"
                | "handler-timeout"
        ),
        Cause::Redis => matches!(
            code,
            "token-store-unavailable"
                | "database-unavailable"
                | "idempotency-store-unavailable"
                | "handler-timeout"
        ),
        Cause::Channel => matches!(
            code,
            "channel-unavailable" | "channel-rejected" | "handler-timeout"
        ),
        Cause::Instance => matches!(code, "handler-timeout" | "service-stopping"),
        Cause::Broker => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_fault_excuses_only_the_codes_its_dependency_gives() {
        let partitioned = "database link partitioned";
        assert!(produces(partitioned, 503, "database-unavailable"));
        assert!(!produces(partitioned, 503, "channel-unavailable"));
        assert!(
            !produces(partitioned, 500, "database-unavailable"),
            "a 500 never"
        );
        let failover = "Redis master killed, replica promoted";
        assert!(produces(failover, 503, "token-store-unavailable"));
        assert!(!produces(failover, 502, "channel-rejected"));
        let simulator = "simulator's faults armed";
        assert!(produces(simulator, 503, "channel-unavailable"));
        assert!(!produces(simulator, 503, "database-unavailable"));
        assert!(!produces("NATS node killed", 503, "database-unavailable"));
        assert!(!produces(
            "fault not injected: its script failed (servers brought back)",
            503,
            "database-unavailable"
        ));
        assert!(produces(
            "service process killed (SIGKILL)",
            504,
            "handler-timeout"
        ));
        assert!(!produces(
            "service process killed (SIGKILL)",
            503,
            "database-unavailable"
        ));
        // A paused process is an instance's fault: its clients hear nothing until it resumes,
        // and a lock it held is waited out; its ceiling is the instance's.
        let paused = "service process paused (SIGSTOP) past its leases, resumed";
        assert!(produces(paused, 504, "handler-timeout"));
        assert!(!produces(paused, 503, "database-unavailable"));
        assert_eq!(unavailability_ceiling_ms(paused), 15_000);
    }
}
