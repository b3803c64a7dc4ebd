//! The outbox table and its relay, on the SQL stores.
//!
//! [`enqueue_in`] writes an event inside the caller's transaction. A [`Relay`] round claims a
//! bounded batch of due rows in a short transaction (`FOR UPDATE SKIP LOCKED` on PostgreSQL and
//! MySQL/MariaDB, so concurrent relays take disjoint rows; `BEGIN IMMEDIATE` on SQLite, which
//! serialises the claim), stamping each with the relay's id and a claim lease. It then
//! publishes outside any transaction — a slow broker never holds database locks — and marks a
//! row sent only after the broker confirmed it. A failed publish puts the row back with an
//! exponential delay ([`super::retry_delay`]). A relay that dies holding claims leaves rows
//! that become due again when the lease runs out: those rows are published again, which is
//! the at-least-once half of the contract (consumers dedup on the message id).
//!
//! Rows are published roughly in the order they became due; there is no ordering guarantee
//! across rows, so consumers must not depend on one.
//!
//! A row the broker keeps refusing (it answered, and did not take the message: a negative
//! confirm, a message returned as unroutable, no stream for its subject) is not retried for
//! ever: after [`RelaySettings::park_after_refusals`] refusals it is **parked** — left out of
//! the relay's rounds and of the [`Backlog`], counted (`mideng_outbox_parked_total`), logged as
//! an error and listed by [`parked`] — until a person [`replay_parked`]s it (due at once, its
//! refusals reset) or [`discard_parked`]s it, either with a reason kept on the row. An outage
//! (unreachable, no confirmation in time) never counts towards parking: those rows wait for the
//! broker however long it is away.

use std::sync::Arc;
use std::time::{Duration, Instant};

use sqlx::Database;

use super::{BrokerError, Message, Publisher, retry_delay};
use crate::clock::now_ms;
use crate::error::{InvalidInput, StoreError};
use crate::latency::op;
use crate::limits::{OUTBOX_BATCH_MAX, OUTBOX_PAYLOAD_BYTES_MAX, PURGE_BATCH_ROWS_MAX};
use crate::record::new_owner;
use crate::store::sql::{Arg, Dialect, PerDialect, SqlConn, SqlRow, SqlStore, store_error, timer};

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_outbox (id, topic, message_key, payload, created_at, available_at) VALUES ("
    ? ", " ? ", " ? ", " ? ", " ? ", " ? ")"
);
/// Due rows, skipping those another relay is claiming (SQLite's `BEGIN IMMEDIATE` serialises
/// the claims instead).
const SELECT_DUE_LOCKED: PerDialect<&str> = crate::dialect_sql!(
    "SELECT id, topic, message_key, payload, attempts FROM mideng_outbox \
     WHERE sent_at IS NULL AND parked_at IS NULL AND available_at <= " ? " AND claimed_until <= " ?
    " ORDER BY available_at, id LIMIT " ? skip_locked
);
const CLAIM: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET claimed_by = " ? ", claimed_until = " ?
    ", attempts = attempts + 1 WHERE id = " ?
);
const MARK_SENT: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET sent_at = " ? ", claimed_by = NULL, claimed_until = 0, last_error = NULL \
     WHERE id = " ? " AND sent_at IS NULL"
);
const DEFER: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET available_at = " ? ", claimed_until = 0, last_error = " ?
    " WHERE id = " ? " AND claimed_by = " ? " AND sent_at IS NULL"
);
/// [`DEFER`] for a refusal: one more counted.
const DEFER_REFUSED: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET available_at = " ? ", claimed_until = 0, last_error = " ?
    ", refusals = refusals + 1 WHERE id = " ? " AND claimed_by = " ? " AND sent_at IS NULL"
);
/// Parks the row once its refusals reach the bound (a separate statement: a crash between the
/// two leaves the count, and the next refusal parks it).
const PARK_IF_REFUSED: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET parked_at = " ? " WHERE id = " ? " AND claimed_by = " ?
    " AND sent_at IS NULL AND parked_at IS NULL AND refusals >= " ?
);
const PARKED: PerDialect<&str> = crate::dialect_sql!(
    "SELECT id, topic, message_key, refusals, attempts, COALESCE(last_error, ''), created_at, parked_at FROM mideng_outbox WHERE parked_at IS NOT NULL AND sent_at IS NULL"
    " ORDER BY parked_at, id LIMIT " ?
);
const PARKED_COUNT: PerDialect<&str> = crate::dialect_sql!(
    "SELECT COUNT(*) FROM mideng_outbox WHERE parked_at IS NOT NULL AND sent_at IS NULL"
);
const UNPARK: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET parked_at = NULL, refusals = 0, available_at = " ?
    ", claimed_until = 0, resolution = " ?
    " WHERE id = " ? " AND parked_at IS NOT NULL AND sent_at IS NULL"
);
const DISCARD: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_outbox SET sent_at = " ? ", resolution = " ?
    " WHERE id = " ? " AND parked_at IS NOT NULL AND sent_at IS NULL"
);
/// A bounded delete; MySQL cannot delete through a subquery on the same table.
const PURGE_SENT: PerDialect<&str> = crate::dialect_sql!(
    "DELETE FROM mideng_outbox WHERE "
    { mysql: "", _: "id IN (SELECT id FROM mideng_outbox WHERE " }
    "sent_at IS NOT NULL AND sent_at <= " ? " LIMIT " ?
    { postgres: " FOR UPDATE SKIP LOCKED)", sqlite: ")", mysql: "" }
);
const BACKLOG: PerDialect<&str> = crate::dialect_sql!(
    "SELECT COUNT(*), "
    // Cast so that MySQL, too, returns a signed 64-bit integer for the port's `int`.
    { mysql: "CAST(COALESCE(MIN(created_at), 0) AS SIGNED)", _: "COALESCE(MIN(created_at), 0)" }
    " FROM mideng_outbox WHERE sent_at IS NULL AND parked_at IS NULL"
);

/// A new message id: `evt_` and 32 hexadecimal digits of OS randomness.
pub fn new_message_id() -> String {
    format!("evt_{}", new_owner())
}

/// Checks what a caller may put in the outbox (and in the in-database queue).
pub(crate) fn validate(topic: &str, key: &str, payload: &[u8]) -> Result<(), InvalidInput> {
    let topic_ok = !topic.is_empty()
        && topic.len() <= 128
        && topic
            .bytes()
            .all(|byte| byte.is_ascii_alphanumeric() || matches!(byte, b'.' | b'_' | b'-'));
    if !topic_ok {
        return Err(InvalidInput::Malformed {
            what: "outbox topic",
            max_bytes: 128,
            alphabet: "ASCII letters, digits, '.', '_' and '-'",
        });
    }
    if key.is_empty() || key.len() > 255 {
        return Err(InvalidInput::Malformed {
            what: "outbox message key",
            max_bytes: 255,
            alphabet: "UTF-8",
        });
    }
    if payload.len() > OUTBOX_PAYLOAD_BYTES_MAX {
        return Err(InvalidInput::SizeOutOfRange {
            what: "outbox payload",
            min_bytes: 0,
            max_bytes: OUTBOX_PAYLOAD_BYTES_MAX,
        });
    }
    Ok(())
}

/// Writes an event into the outbox inside the caller's transaction, so that it exists if and
/// only if the transaction commits. Returns the message id. On SQLite the transaction must have
/// been opened with [`SqlStore::begin_write`].
pub async fn enqueue_in<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    topic: &str,
    key: &str,
    payload: &[u8],
) -> Result<String, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_ENQUEUE);
    validate(topic, key, payload)?;
    let id = new_message_id();
    let now = now_ms();
    connection
        .run(
            INSERT.get::<D>(),
            &[
                Arg::Text(&id),
                Arg::Text(topic),
                Arg::Text(key),
                Arg::OptBytes(Some(payload)),
                Arg::Int(now),
                Arg::Int(now),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    Ok(id)
}

/// How a relay works; every field is bounded by [`RelaySettings::validate`].
#[derive(Clone, Copy, Debug)]
pub struct RelaySettings {
    /// Most rows claimed per round (1 to [`OUTBOX_BATCH_MAX`]).
    pub batch: u32,
    /// How long a claim keeps other relays off the rows; the whole batch must be published
    /// within it, and a relay that died is replaced after it.
    pub claim_lease: Duration,
    /// Longest wait for one broker confirmation.
    pub publish_timeout: Duration,
    /// Longest delay between attempts at an undeliverable row.
    pub retry_cap: Duration,
    /// Refusals of one row (the broker answered and did not take it, not "unreachable" or
    /// "no confirmation") after which it is parked for a person, 1 to
    /// [`PARK_AFTER_REFUSALS_MAX`]: left out of every round and of the backlog, counted, and
    /// listed by [`parked`] until [`replay_parked`] or [`discard_parked`].
    pub park_after_refusals: u32,
}

/// The most refusals [`RelaySettings::park_after_refusals`] may wait for.
pub const PARK_AFTER_REFUSALS_MAX: u32 = 1_000;

impl Default for RelaySettings {
    fn default() -> Self {
        Self {
            batch: 100,
            claim_lease: Duration::from_secs(30),
            publish_timeout: Duration::from_secs(10),
            retry_cap: Duration::from_secs(60),
            park_after_refusals: 20,
        }
    }
}

impl RelaySettings {
    /// Refuses settings under which a batch could outlive its claim or run unbounded.
    pub fn validate(&self) -> Result<(), InvalidInput> {
        if self.batch == 0 || self.batch > OUTBOX_BATCH_MAX {
            return Err(InvalidInput::CountOutOfRange {
                what: "relay batch (rows)",
                min: 1,
                max: u64::from(OUTBOX_BATCH_MAX),
            });
        }
        if self.publish_timeout.is_zero() || self.claim_lease < self.publish_timeout * 2 {
            return Err(InvalidInput::OutOfRange {
                what: "relay claim lease (at least twice the publish timeout)",
                min_ms: u64::try_from(self.publish_timeout.as_millis() * 2).unwrap_or(u64::MAX),
                max_ms: 24 * 3600 * 1000,
            });
        }
        if !(1..=PARK_AFTER_REFUSALS_MAX).contains(&self.park_after_refusals) {
            return Err(InvalidInput::CountOutOfRange {
                what: "relay refusals before a row is parked",
                min: 1,
                max: u64::from(PARK_AFTER_REFUSALS_MAX),
            });
        }
        if self.retry_cap < Duration::from_secs(1) {
            return Err(InvalidInput::OutOfRange {
                what: "relay retry cap",
                min_ms: 1000,
                max_ms: 24 * 3600 * 1000,
            });
        }
        Ok(())
    }
}

/// What one relay round did.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayRound {
    /// Rows claimed.
    pub claimed: u32,
    /// Rows confirmed by the broker and marked sent.
    pub sent: u32,
    /// Rows put back for a later attempt (publish failed, or not reached within the lease).
    pub deferred: u32,
    /// Rows the broker refused once too often, parked for a person (counted in `deferred`
    /// too).
    pub parked: u32,
}

/// Unsent rows and the age of the oldest, for gauges and tests.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Backlog {
    /// Rows not yet sent, parked rows left out.
    pub unsent: u64,
    /// Creation time (Unix ms) of the oldest unsent row, if any.
    pub oldest_created_at_ms: Option<i64>,
}

struct Claimed {
    message: Message,
    attempts: u32,
}

/// Drains the outbox of one SQL store into one publisher.
#[derive(Debug, Clone)]
pub struct Relay<D: Dialect> {
    store: SqlStore<D>,
    publisher: Arc<dyn Publisher>,
    settings: RelaySettings,
    id: String,
}

impl<D: Dialect> Relay<D> {
    /// A relay with its own random id (several relays may run against one outbox).
    pub fn new(
        store: SqlStore<D>,
        publisher: Arc<dyn Publisher>,
        settings: RelaySettings,
    ) -> Result<Self, InvalidInput> {
        settings.validate()?;
        Ok(Self {
            store,
            publisher,
            settings,
            id: new_owner(),
        })
    }

    /// This relay's id, as stored in the rows it claims.
    pub fn id(&self) -> &str {
        &self.id
    }

    /// The publisher's name.
    pub fn publisher(&self) -> &'static str {
        self.publisher.name()
    }

    /// One round: claim a batch of due rows, publish each, mark the confirmed ones sent and put
    /// the others back with a delay. After the first `Unavailable` or `Timeout` the rest of the
    /// batch is put back without trying, so a broker outage costs one timeout per round, not
    /// one per row.
    pub async fn run_once(&self) -> Result<RelayRound, StoreError> {
        let started = Instant::now();
        let claimed = self.claim().await?;
        let mut round = RelayRound {
            claimed: u32::try_from(claimed.len()).unwrap_or(u32::MAX),
            ..RelayRound::default()
        };
        // Keep a margin of one publish timeout: a row is never published after its claim ran
        // out, when another relay may already have it.
        let deadline = self
            .settings
            .claim_lease
            .saturating_sub(self.settings.publish_timeout);
        let mut broker_down: Option<String> = None;
        for row in claimed {
            let mut refused = false;
            let failure = if let Some(reason) = &broker_down {
                Some(reason.clone())
            } else if started.elapsed() >= deadline {
                Some("claim lease ran out before publishing".to_owned())
            } else {
                match tokio::time::timeout(
                    self.settings.publish_timeout,
                    self.publisher.publish(&row.message),
                )
                .await
                {
                    Ok(Ok(())) => None,
                    Ok(Err(error)) => {
                        let reason = error.to_string();
                        if matches!(error, BrokerError::Unavailable(_) | BrokerError::Timeout(_)) {
                            broker_down = Some(reason.clone());
                        }
                        refused = matches!(error, BrokerError::Refused(_));
                        Some(reason)
                    }
                    Err(_) => {
                        let reason =
                            BrokerError::Timeout(self.settings.publish_timeout).to_string();
                        broker_down = Some(reason.clone());
                        Some(reason)
                    }
                }
            };
            match failure {
                None => {
                    self.mark_sent(&row.message.id).await?;
                    round.sent += 1;
                    tracing::debug!(
                        id = %row.message.id,
                        topic = %row.message.topic,
                        publisher = self.publisher.name(),
                        "outbox row published"
                    );
                }
                Some(reason) => {
                    let delay = retry_delay(row.attempts, self.settings.retry_cap);
                    self.defer(&row.message.id, delay, &reason, refused).await?;
                    round.deferred += 1;
                    if refused && self.park_if_refused(&row.message.id).await? {
                        round.parked += 1;
                        metrics::counter!(crate::metrics::OUTBOX_PARKED,
                            "publisher" => self.publisher.name())
                        .increment(1);
                        tracing::error!(
                            id = %row.message.id,
                            topic = %row.message.topic,
                            refusals = self.settings.park_after_refusals,
                            publisher = self.publisher.name(),
                            %reason,
                            "outbox row refused too often: parked for a person (replay or discard it)"
                        );
                        continue;
                    }
                    tracing::warn!(
                        id = %row.message.id,
                        topic = %row.message.topic,
                        attempts = row.attempts,
                        retry_in_ms = u64::try_from(delay.as_millis()).unwrap_or(u64::MAX),
                        publisher = self.publisher.name(),
                        %reason,
                        "outbox row not published; will retry"
                    );
                }
            }
        }
        Ok(round)
    }

    async fn claim(&self) -> Result<Vec<Claimed>, StoreError> {
        let _timer = timer::<D>(op::OUTBOX_CLAIM);
        let now = now_ms();
        let lease_ms = i64::try_from(self.settings.claim_lease.as_millis()).unwrap_or(i64::MAX);
        let until = now.saturating_add(lease_ms);
        let batch = i64::from(self.settings.batch);
        let owner = self.id.as_str();
        self.store
            .write(|transaction| Box::pin(claim_on::<D>(transaction, owner, now, until, batch)))
            .await
    }

    async fn mark_sent(&self, id: &str) -> Result<(), StoreError> {
        let _timer = timer::<D>(op::OUTBOX_MARK_SENT);
        self.autocommit(MARK_SENT.get::<D>(), &[Arg::Int(now_ms()), Arg::Text(id)])
            .await
    }

    async fn defer(
        &self,
        id: &str,
        delay: Duration,
        reason: &str,
        refused: bool,
    ) -> Result<(), StoreError> {
        let _timer = timer::<D>(op::OUTBOX_DEFER);
        let delay_ms = i64::try_from(delay.as_millis()).unwrap_or(i64::MAX);
        let reason: String = reason.chars().take(200).collect();
        let statement = if refused { &DEFER_REFUSED } else { &DEFER };
        self.autocommit(
            statement.get::<D>(),
            &[
                Arg::Int(now_ms().saturating_add(delay_ms)),
                Arg::Text(&reason),
                Arg::Text(id),
                Arg::Text(&self.id),
            ],
        )
        .await
    }

    /// Parks the row if its refusals reached the bound; whether it did.
    async fn park_if_refused(&self, id: &str) -> Result<bool, StoreError> {
        let _timer = timer::<D>(op::OUTBOX_DEFER);
        let parked = self
            .store
            .run_once(
                PARK_IF_REFUSED.get::<D>(),
                &[
                    Arg::Int(now_ms()),
                    Arg::Text(id),
                    Arg::Text(&self.id),
                    Arg::Int(i64::from(self.settings.park_after_refusals)),
                ],
            )
            .await?;
        Ok(parked == 1)
    }

    async fn autocommit(&self, sql: &'static str, args: &[Arg<'_>]) -> Result<(), StoreError> {
        self.store.run_once(sql, args).await.map(|_| ())
    }
}

async fn claim_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    owner: &str,
    now: i64,
    until: i64,
    batch: i64,
) -> Result<Vec<Claimed>, StoreError> {
    let rows = claim_rows::<D>(
        connection,
        SELECT_DUE_LOCKED.get::<D>(),
        &[Arg::Int(now), Arg::Int(now), Arg::Int(batch)],
        CLAIM.get::<D>(),
        owner,
        until,
    )
    .await?;
    Ok(rows
        .into_iter()
        .map(|(message, attempts)| Claimed {
            message,
            attempts: u32::try_from(attempts.saturating_add(1)).unwrap_or(u32::MAX),
        })
        .collect())
}

/// Selects due rows with `select` (columns: id, topic, message key, payload, a counter), then
/// stamps each with `claim` (owner, until, id), in the caller's write transaction; the outbox
/// and the in-database queue claim the same way. The messages and their counters.
pub(crate) async fn claim_rows<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    select: &'static str,
    select_args: &[Arg<'_>],
    claim: &'static str,
    owner: &str,
    until: i64,
) -> Result<Vec<(Message, i64)>, StoreError> {
    let rows = connection
        .rows(select, select_args)
        .await
        .map_err(store_error::<D>)?;
    let read = |error: sqlx::Error| store_error::<D>(error);
    // Decoded before the next statement: a driver row need not be shareable across an await.
    let claimed = rows
        .iter()
        .map(|row| {
            let message = Message {
                id: row.text(0).map_err(read)?,
                topic: row.text(1).map_err(read)?,
                key: row.text(2).map_err(read)?,
                payload: row.opt_bytes(3).map_err(read)?.unwrap_or_default(),
            };
            Ok((message, row.int(4).map_err(read)?))
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    drop(rows);
    for (message, _) in &claimed {
        connection
            .run(
                claim,
                &[Arg::Text(owner), Arg::Int(until), Arg::Text(&message.id)],
            )
            .await
            .map_err(store_error::<D>)?;
    }
    Ok(claimed)
}

/// Deletes at most `limit` rows sent before `sent_before_ms`; returns how many it deleted.
pub async fn purge_sent<D: Dialect>(
    store: &SqlStore<D>,
    sent_before_ms: i64,
    limit: u32,
) -> Result<u64, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_PURGE);
    let limit = i64::from(limit.clamp(1, PURGE_BATCH_ROWS_MAX));
    let mut connection = store.pool().acquire().await.map_err(store_error::<D>)?;
    connection
        .run(
            PURGE_SENT.get::<D>(),
            &[Arg::Int(sent_before_ms), Arg::Int(limit)],
        )
        .await
        .map_err(store_error::<D>)
}

/// A row the broker refused too often, parked for a person.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ParkedRow {
    /// The message id.
    pub id: String,
    /// Its topic.
    pub topic: String,
    /// Its key.
    pub key: String,
    /// Refusals counted.
    pub refusals: i64,
    /// Claims in all, refusals, outages and timeouts together.
    pub attempts: i64,
    /// The last failure, as the relay recorded it.
    pub last_error: String,
    /// When it was written (Unix ms).
    pub created_at_ms: i64,
    /// When it was parked (Unix ms).
    pub parked_at_ms: i64,
}

/// The parked rows, oldest parked first, at most `limit` (1 to [`OUTBOX_BATCH_MAX`]).
pub async fn parked<D: Dialect>(
    store: &SqlStore<D>,
    limit: u32,
) -> Result<Vec<ParkedRow>, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_BACKLOG);
    let limit = i64::from(limit.clamp(1, OUTBOX_BATCH_MAX));
    let mut connection = store.pool().acquire().await.map_err(store_error::<D>)?;
    let read = |error: sqlx::Error| store_error::<D>(error);
    connection
        .rows(PARKED.get::<D>(), &[Arg::Int(limit)])
        .await
        .map_err(read)?
        .iter()
        .map(|row| {
            Ok(ParkedRow {
                id: row.text(0).map_err(read)?,
                topic: row.text(1).map_err(read)?,
                key: row.text(2).map_err(read)?,
                refusals: row.int(3).map_err(read)?,
                attempts: row.int(4).map_err(read)?,
                last_error: row.text(5).map_err(read)?,
                created_at_ms: row.int(6).map_err(read)?,
                parked_at_ms: row.int(7).map_err(read)?,
            })
        })
        .collect()
}

/// How many rows are parked.
pub async fn parked_count<D: Dialect>(store: &SqlStore<D>) -> Result<u64, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_BACKLOG);
    store
        .read_row(PARKED_COUNT.get::<D>(), &[], |row| {
            row.int(0).map_err(|error| store_error::<D>(error))
        })
        .await
        .map(|count| {
            count
                .and_then(|count| u64::try_from(count).ok())
                .unwrap_or(0)
        })
}

/// A person's resolution of a parked row, as stored: what was done, and why (at most 200
/// characters of the reason).
fn resolution(done: &str, reason: &str) -> String {
    let reason: String = reason.chars().take(200).collect();
    format!("{done}: {reason}")
}

/// Puts a parked row back in the relay's way, due now with its refusals reset, and records
/// `reason`; whether a parked row of this id was there. A row the broker refuses again is
/// parked again after as many refusals.
pub async fn replay_parked<D: Dialect>(
    store: &SqlStore<D>,
    id: &str,
    reason: &str,
) -> Result<bool, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_DEFER);
    let resolution = resolution("replayed", reason);
    let changed = store
        .run_once(
            UNPARK.get::<D>(),
            &[Arg::Int(now_ms()), Arg::Text(&resolution), Arg::Text(id)],
        )
        .await?;
    Ok(changed == 1)
}

/// Finishes a parked row without sending it, recording `reason` (the row is purged with the
/// sent rows after their retention, its `resolution` saying it was discarded); whether a
/// parked row of this id was there.
pub async fn discard_parked<D: Dialect>(
    store: &SqlStore<D>,
    id: &str,
    reason: &str,
) -> Result<bool, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_DEFER);
    let resolution = resolution("discarded", reason);
    let changed = store
        .run_once(
            DISCARD.get::<D>(),
            &[Arg::Int(now_ms()), Arg::Text(&resolution), Arg::Text(id)],
        )
        .await?;
    Ok(changed == 1)
}

/// How many rows wait to be sent, and since when.
pub async fn backlog<D: Dialect>(store: &SqlStore<D>) -> Result<Backlog, StoreError> {
    let _timer = timer::<D>(op::OUTBOX_BACKLOG);
    let mut connection = store.pool().acquire().await.map_err(store_error::<D>)?;
    let row = connection
        .row(BACKLOG.get::<D>(), &[])
        .await
        .map_err(store_error::<D>)?
        .ok_or_else(|| StoreError::Corrupt("COUNT returned no row".to_owned()))?;
    let read = |error: sqlx::Error| store_error::<D>(error);
    let unsent = u64::try_from(row.int(0).map_err(read)?).unwrap_or(0);
    let oldest = row.int(1).map_err(read)?;
    Ok(Backlog {
        unsent,
        oldest_created_at_ms: (unsent > 0).then_some(oldest),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn topics_keys_and_payloads_are_bounded() {
        assert!(validate("payment.succeeded", "P1", b"{}").is_ok());
        assert!(validate("", "P1", b"{}").is_err());
        assert!(validate("payment succeeded", "P1", b"{}").is_err());
        assert!(validate("payment.succeeded", "", b"{}").is_err());
        assert!(validate("payment.succeeded", &"k".repeat(256), b"{}").is_err());
        let big = vec![b'x'; OUTBOX_PAYLOAD_BYTES_MAX + 1];
        assert!(validate("payment.succeeded", "P1", &big).is_err());
    }

    #[test]
    fn relay_settings_keep_the_batch_inside_its_claim() {
        assert!(RelaySettings::default().validate().is_ok());
        let short_lease = RelaySettings {
            claim_lease: Duration::from_secs(5),
            publish_timeout: Duration::from_secs(5),
            ..RelaySettings::default()
        };
        assert!(short_lease.validate().is_err());
        let no_batch = RelaySettings {
            batch: 0,
            ..RelaySettings::default()
        };
        assert!(no_batch.validate().is_err());
    }
}
