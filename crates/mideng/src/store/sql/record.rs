//! Idempotency records on SQL ([`RecordStore`]), and their transactional forms
//! [`SqlStore::begin_in`] and [`SqlStore::complete_in`], which run inside the caller's
//! transaction so that the record commits or rolls back with the business write.
//!
//! The write path of `begin`, in one write transaction:
//! 1. insert the record with a fresh owner nonce, doing nothing on a duplicate key (PostgreSQL
//!    and SQLite `ON CONFLICT DO NOTHING`; MySQL `ON DUPLICATE KEY UPDATE fence = fence`, which
//!    takes the row's exclusive lock at once instead of a shared lock that would deadlock on
//!    upgrade) — a duplicate never raises an error, so a caller's transaction is never aborted;
//! 2. on PostgreSQL and SQLite, an insert that counted one row is ours: proceed with fence 1
//!    (one round trip); otherwise read the row under a row lock (`FOR UPDATE`; SQLite's
//!    `BEGIN IMMEDIATE` already serialises writers);
//! 3. if the row carries our nonce we inserted it: proceed with fence 1; otherwise apply
//!    [`crate::record::judge`] and, for a take-over, update the row with fence + 1.
//!
//! On MySQL the nonce, not the affected-row count, tells who inserted, because MySQL
//! connections report matched rather than changed rows. A completion and an abandonment are one conditional
//! update each, on the fence and the owner: a lease that was taken over can no longer write.

use async_trait::async_trait;
use sqlx::Database;

use super::engine::{
    Arg, Dialect, SqlConn, SqlDialect, SqlRow, SqlStore, as_fence, as_i64, corrupt,
    retry_conflicts, store_error, timer,
};
use super::statements::PerDialect;
use crate::clock::now_ms;
use crate::error::StoreError;
use crate::key::{Fingerprint, IdempotencyKey, Scope};
use crate::latency::op;
use crate::limits::PURGE_BATCH_ROWS_MAX;
use crate::record::{
    AnswerTemplate, Decision, Lease, Record, RecordPolicy, RecordState, RecordStore,
    StoredResponse, Verdict, judge, new_owner, retry_after,
};

/// The columns `decode_record` reads, in its order.
macro_rules! record_columns {
    () => {
        "fingerprint, state, fence, owner, lease_until, response_status, response_headers, response_body, created_at, expires_at"
    };
}

const INSERT: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at) \
     VALUES (" ? ", " ? ", " ? ", " ? ", 'in_progress', 1, " ? ", " ? ", " ? ", " ? ")"
    {
        mysql: " ON DUPLICATE KEY UPDATE fence = fence",
        _: " ON CONFLICT (tenant, operation, idempotency_key) DO NOTHING"
    }
);
const INSERT_COMPLETED: PerDialect<&str> = crate::dialect_sql!(
    "INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at, response_status, response_headers, response_body) \
     VALUES (" ? ", " ? ", " ? ", " ? ", 'completed', 1, " ? ", " ? ", " ? ", " ? ", " ? ", " ? ", " ? ")"
    {
        mysql: " ON DUPLICATE KEY UPDATE fence = fence",
        _: " ON CONFLICT (tenant, operation, idempotency_key) DO NOTHING"
    }
);
const SELECT_LOCKED: PerDialect<&str> = crate::dialect_sql!(
    "SELECT " record_columns!() " FROM mideng_records WHERE tenant = " ? " AND operation = " ?
    " AND idempotency_key = " ? for_update
);
const SELECT: PerDialect<&str> = crate::dialect_sql!(
    "SELECT " record_columns!() " FROM mideng_records WHERE tenant = " ? " AND operation = " ?
    " AND idempotency_key = " ?
);
const TAKE_OVER: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_records SET fingerprint = " ? ", state = 'in_progress', fence = " ? ", owner = " ?
    ", lease_until = " ? ", response_status = NULL, response_headers = NULL, response_body = NULL, created_at = " ?
    ", expires_at = " ? " WHERE tenant = " ? " AND operation = " ? " AND idempotency_key = " ? " AND fence = " ?
);
const COMPLETE: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_records SET state = 'completed', response_status = " ? ", response_headers = " ?
    ", response_body = " ? ", expires_at = " ? " WHERE tenant = " ? " AND operation = " ?
    " AND idempotency_key = " ? " AND fence = " ? " AND owner = " ? " AND state = 'in_progress'"
);
const ABANDON: PerDialect<&str> = crate::dialect_sql!(
    "UPDATE mideng_records SET state = 'abandoned', lease_until = 0 WHERE tenant = " ?
    " AND operation = " ? " AND idempotency_key = " ? " AND fence = " ? " AND owner = " ?
    " AND state = 'in_progress'"
);
/// A bounded delete: PostgreSQL skips rows another purge holds; SQLite and MySQL, which cannot
/// limit a delete through a subquery on the same table, go by rowid and `ORDER BY … LIMIT`.
const PURGE: PerDialect<&str> = crate::dialect_sql!(
    "DELETE FROM mideng_records WHERE "
    {
        postgres: "(tenant, operation, idempotency_key) IN (SELECT tenant, operation, idempotency_key FROM mideng_records WHERE ",
        sqlite: "rowid IN (SELECT rowid FROM mideng_records WHERE ",
        mysql: ""
    }
    "expires_at <= " ? " AND lease_until <= " ? { mysql: " ORDER BY expires_at", _: "" } " LIMIT " ?
    { postgres: " FOR UPDATE SKIP LOCKED)", sqlite: ")", mysql: "" }
);

/// A data-modifying `WITH` item named `claim`, for PostgreSQL statements that claim an
/// idempotency record and act on it in one round trip: it inserts the record exactly as
/// [`SqlStore::begin_in`] does for a first arrival, and returns the row's `fence` only when
/// this statement inserted it. Its parameters `$1` … `$8` are [`FirstClaim::args`], in order;
/// the caller's own items follow it (numbering their parameters from `$9`) and act only
/// `WHERE EXISTS (SELECT 1 FROM claim)`. When `claim` returned nothing the key was taken
/// before: nothing else acted, and the caller goes the way of `begin_in` (which reads the
/// record under its row lock and judges it). `$1` is the scope's tenant, `$7` now in Unix ms.
#[macro_export]
macro_rules! postgres_claim_cte {
    () => {
        "claim AS (INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at) \
         VALUES ($1, $2, $3, $4, 'in_progress', 1, $5, $6, $7, $8) \
         ON CONFLICT (tenant, operation, idempotency_key) DO NOTHING RETURNING fence)"
    };
}

/// The values of a first arrival's record, for a statement built on
/// [`postgres_claim_cte!`](crate::postgres_claim_cte), and the lease it holds when that
/// statement inserted the record.
#[derive(Clone, Debug)]
pub struct FirstClaim {
    lease: Lease,
    fingerprint_hex: String,
    now_ms: i64,
    expires_at_ms: i64,
}

impl FirstClaim {
    /// A claim of `key` in `scope` for a request with `fingerprint`, now.
    pub fn new(
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Self {
        let now = now_ms();
        Self {
            lease: Lease {
                scope: scope.clone(),
                key: key.clone(),
                fence: 1,
                owner: new_owner(),
                lease_until_ms: now.saturating_add(policy.lease_ms()),
                retention_ms: policy.retention_ms(),
                taken_over: false,
            },
            fingerprint_hex: fingerprint.to_hex(),
            now_ms: now,
            expires_at_ms: now.saturating_add(policy.retention_ms()),
        }
    }

    /// `$1` … `$8` of the `claim` item: tenant, operation, key, fingerprint, owner, lease end,
    /// now, expiry.
    pub fn args(&self) -> [Arg<'_>; 8] {
        let [tenant, operation, key] = record_key_args(&self.lease.scope, &self.lease.key);
        [
            tenant,
            operation,
            key,
            Arg::Text(&self.fingerprint_hex),
            Arg::Text(&self.lease.owner),
            Arg::Int(self.lease.lease_until_ms),
            Arg::Int(self.now_ms),
            Arg::Int(self.expires_at_ms),
        ]
    }

    /// Now, as the claim wrote it (Unix ms).
    pub fn now_ms(&self) -> i64 {
        self.now_ms
    }

    /// The lease held when the statement inserted the record: complete it with
    /// [`SqlStore::complete_in`] in the same transaction.
    pub fn lease(&self) -> &Lease {
        &self.lease
    }
}

/// A `WITH` item named `claim`, for PostgreSQL statements that act only for a key no record
/// holds yet, and write the key's record afterwards, completed with its answer, by
/// [`SqlStore::insert_completed_in`] in the same transaction: the record is written once,
/// where [`postgres_claim_cte!`](crate::postgres_claim_cte) inserts it in progress and
/// `complete_in` writes it a second time. It returns one row when no record of the key is
/// visible to the statement. Its parameters are [`FirstClaim::args`] in order (it reads `$1` …
/// `$3`; the others are typed by the driver and may go unused); the caller's items number theirs
/// from `$9` and act only `WHERE EXISTS (SELECT 1 FROM claim)`.
///
/// A duplicate running at the same moment does not see the other's record either: both act,
/// and the second's `insert_completed_in` meets the first's record and answers false. The
/// caller then rolls its transaction back, which undoes its act, and goes the way of
/// `begin_in`, which judges the record the first one wrote. So the act must be one that a
/// rollback undoes whole (no call outside the database), and should meet the same constraint
/// a duplicate's act would (a business key), so that duplicates wait for each other instead of
/// both doing work that one of them throws away.
#[macro_export]
macro_rules! postgres_unrecorded_cte {
    () => {
        "claim AS (SELECT 1 AS fence WHERE NOT EXISTS (SELECT 1 FROM mideng_records \
         WHERE tenant = $1 AND operation = $2 AND idempotency_key = $3))"
    };
}

/// A `WITH` item named `recorded`, for a PostgreSQL statement built on
/// [`postgres_unrecorded_cte!`](crate::postgres_unrecorded_cte) that writes the key's record,
/// completed with its answer, in the same statement as the act, so that a first-time request
/// is one statement and, outside a transaction, one round trip and one commit. For each row of
/// the caller's item `$source` (one, when the act happened) it inserts the record with the
/// answer of an [`AnswerTemplate`](crate::record::AnswerTemplate): `$9` status, `$10`
/// headers, the body `$11 ‖ $value ‖ $12`, where `$value` is an integer column of `$source`
/// (written in decimal, as [`AnswerTemplate::fill`](crate::record::AnswerTemplate::fill) does
/// with `i64::to_string`). [`FirstClaim::recorded_args`] gives `$1` … `$12`; the caller's
/// parameters number from `$13`.
///
/// It has no `ON CONFLICT`: a record of the key written by a duplicate meanwhile makes the
/// statement fail with a unique violation, which undoes the whole statement (the act too), and
/// the caller goes the way of `begin_in`. So the act must be all in the statement and should
/// itself meet a unique constraint a duplicate's act would meet (a business key), so that
/// duplicates wait for each other instead of both acting. Run outside a transaction, a broken
/// connection after the statement was sent leaves its outcome unknown, as a broken `COMMIT`
/// does ([`autocommit_error`](super::autocommit_error)).
#[macro_export]
macro_rules! postgres_recorded_cte {
    ($source:literal, $value:literal) => {
        concat!(
            "recorded AS (INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at, response_status, response_headers, response_body) \
             SELECT $1, $2, $3, $4, 'completed', 1, $5, $6, $7, $8, $9, $10, $11 || convert_to(",
            $value,
            "::text, 'UTF8') || $12 FROM ",
            $source,
            " RETURNING 1)"
        )
    };
}

/// The columns of one request's record in a batch, as a `jsonb_to_recordset` column list: a
/// PostgreSQL statement that acts for many requests at once reads its input with them (each
/// request's object made by [`FirstClaim::recorded_row`]) beside its own columns, and writes
/// the records with [`postgres_recorded_rows_cte!`](crate::postgres_recorded_rows_cte).
#[macro_export]
macro_rules! postgres_recorded_row_columns {
    () => {
        "tenant text, operation text, idempotency_key text, fingerprint text, owner text, \
         lease_until bigint, created_at bigint, expires_at bigint, response_status integer, \
         response_headers text, body_prefix text, body_suffix text"
    };
}

/// [`postgres_recorded_cte!`](crate::postgres_recorded_cte) for many requests at once: a `WITH`
/// item named `recorded` that inserts, for each row of the caller's item `$source` (which has
/// the [`postgres_recorded_row_columns!`](crate::postgres_recorded_row_columns) and an integer
/// column `$value`), that request's record completed with its answer, `$value` filled into the
/// hole, in the keys' order (so that two statements with keys in common wait for each other
/// without a deadlock). Like the single form it has no `ON CONFLICT`: a record of any of the
/// keys written meanwhile fails the whole statement, and every request goes the way of
/// `begin_in`; so a statement must not hold one key twice.
#[macro_export]
macro_rules! postgres_recorded_rows_cte {
    ($source:literal, $value:literal) => {
        concat!(
            "recorded AS (INSERT INTO mideng_records (tenant, operation, idempotency_key, fingerprint, state, fence, owner, lease_until, created_at, expires_at, response_status, response_headers, response_body) \
             SELECT tenant, operation, idempotency_key, fingerprint, 'completed', 1, owner, lease_until, created_at, expires_at, response_status, response_headers, \
             decode(body_prefix, 'hex') || convert_to(",
            $value,
            "::text, 'UTF8') || decode(body_suffix, 'hex') FROM ",
            $source,
            " ORDER BY tenant, operation, idempotency_key RETURNING 1)"
        )
    };
}

/// One request's record in a batch: the object a statement built on
/// [`postgres_recorded_rows_cte!`](crate::postgres_recorded_rows_cte) reads with
/// `jsonb_to_recordset` (the body's bytes in hex).
#[derive(Clone, Debug, serde::Serialize)]
pub struct RecordedRow {
    tenant: String,
    operation: String,
    idempotency_key: String,
    fingerprint: String,
    owner: String,
    lease_until: i64,
    created_at: i64,
    expires_at: i64,
    response_status: u16,
    response_headers: String,
    body_prefix: String,
    body_suffix: String,
}

impl FirstClaim {
    /// This request's record in a batch, completed with `template`'s answer
    /// ([`postgres_recorded_rows_cte!`](crate::postgres_recorded_rows_cte)).
    pub fn recorded_row(&self, template: &AnswerTemplate) -> RecordedRow {
        RecordedRow {
            tenant: self.lease.scope.tenant().to_owned(),
            operation: self.lease.scope.operation().to_owned(),
            idempotency_key: self.lease.key.as_str().to_owned(),
            fingerprint: self.fingerprint_hex.clone(),
            owner: self.lease.owner.clone(),
            lease_until: self.lease.lease_until_ms,
            created_at: self.now_ms,
            expires_at: self.expires_at_ms,
            response_status: template.status(),
            response_headers: template.headers_json().to_owned(),
            body_prefix: hex::encode(template.prefix()),
            body_suffix: hex::encode(template.suffix()),
        }
    }

    /// `$1` … `$12` of a statement with a [`postgres_recorded_cte!`](crate::postgres_recorded_cte)
    /// item: [`FirstClaim::args`], then the template's status, headers, and the body's bytes
    /// before and after the hole.
    pub fn recorded_args<'a>(&'a self, template: &'a AnswerTemplate) -> [Arg<'a>; 12] {
        let claim = self.args();
        let answer = [
            Arg::Int(i64::from(template.status())),
            Arg::Text(template.headers_json()),
            Arg::OptBytes(Some(template.prefix())),
            Arg::OptBytes(Some(template.suffix())),
        ];
        let mut args = [Arg::Int(0); 12];
        args[..8].copy_from_slice(&claim);
        args[8..].copy_from_slice(&answer);
        args
    }
}

impl<D: Dialect> SqlStore<D> {
    /// Writes the record of `first`'s key completed with `response`, in the caller's
    /// transaction, unless a record of the key exists (committed, or written by a transaction
    /// this one then waited for): whether it wrote it. After `false` the caller must roll back
    /// what it did in the transaction and take the way of `begin_in`
    /// ([`postgres_unrecorded_cte!`](crate::postgres_unrecorded_cte)).
    pub async fn insert_completed_in(
        &self,
        connection: &mut <D::Db as Database>::Connection,
        first: &FirstClaim,
        response: &StoredResponse,
    ) -> Result<bool, StoreError> {
        let _timer = timer::<D>(op::RECORD_COMPLETE);
        response.validate()?;
        let headers = response.headers_json();
        let [
            tenant,
            operation,
            key,
            fingerprint,
            owner,
            lease_until,
            now,
            expires,
        ] = first.args();
        let changed = connection
            .run(
                INSERT_COMPLETED.get::<D>(),
                &[
                    tenant,
                    operation,
                    key,
                    fingerprint,
                    owner,
                    lease_until,
                    now,
                    expires,
                    Arg::OptInt(Some(i64::from(response.status))),
                    Arg::OptText(Some(&headers)),
                    Arg::OptBytes(Some(&response.body)),
                ],
            )
            .await
            .map_err(store_error::<D>)?;
        if D::KIND != SqlDialect::MySql {
            // PostgreSQL and SQLite count only the rows an `ON CONFLICT DO NOTHING` inserted.
            return Ok(changed == 1);
        }
        // MySQL's count does not tell an insert from a duplicate its ON DUPLICATE KEY clause
        // left alone (the driver asks for rows found): the row's owner nonce does.
        let [tenant, operation, key] = record_key_args(&first.lease.scope, &first.lease.key);
        let row = connection
            .row(SELECT_LOCKED.get::<D>(), &[tenant, operation, key])
            .await
            .map_err(store_error::<D>)?
            .ok_or_else(|| StoreError::Conflict("record vanished during its write".to_owned()))?;
        let written = decode_record(&row, &first.lease.scope, &first.lease.key)?;
        Ok(written.owner == first.lease.owner)
    }

    /// [`RecordStore::begin`] inside the caller's transaction, so that the record commits or
    /// rolls back with the business write. On PostgreSQL and MySQL the record's row stays
    /// locked until the caller's transaction ends: a concurrent `begin` on the same key waits
    /// and then sees the outcome. On SQLite the transaction must have been opened with
    /// [`SqlStore::begin_write`]. Conflicts are not retried here (the caller's transaction may
    /// be aborted): they come back as [`StoreError::Conflict`] for the caller to retry whole.
    pub async fn begin_in(
        &self,
        connection: &mut <D::Db as Database>::Connection,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        let _timer = timer::<D>(op::RECORD_BEGIN);
        begin_on::<D>(connection, scope, key, fingerprint, policy).await
    }

    /// [`RecordStore::complete`] inside the caller's transaction.
    pub async fn complete_in(
        &self,
        connection: &mut <D::Db as Database>::Connection,
        lease: &Lease,
        response: &StoredResponse,
    ) -> Result<(), StoreError> {
        let _timer = timer::<D>(op::RECORD_COMPLETE);
        complete_on::<D>(connection, lease, response).await
    }
}

impl<D: Dialect> SqlStore<D> {
    /// The record, read outside any transaction: `find_record`, and the cheap first step of
    /// `begin` (timed as part of the `begin`).
    async fn read_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        self.read_row(SELECT.get::<D>(), &record_key_args(scope, key), |row| {
            decode_record(row, scope, key)
        })
        .await
    }
}

fn record_key_args<'a>(scope: &'a Scope, key: &'a IdempotencyKey) -> [Arg<'a>; 3] {
    [
        Arg::Text(scope.tenant()),
        Arg::Text(scope.operation()),
        Arg::Text(key.as_str()),
    ]
}

/// Columns of `record_select*`: fingerprint, state, fence, owner, lease_until, response_status,
/// response_headers, response_body, created_at, expires_at.
fn decode_record<R: SqlRow>(
    row: &R,
    scope: &Scope,
    key: &IdempotencyKey,
) -> Result<Record, StoreError> {
    let read = |error: sqlx::Error| StoreError::Corrupt(format!("unreadable record: {error}"));
    let fingerprint = Fingerprint::from_hex(&row.text(0).map_err(read)?)?;
    let state_text = row.text(1).map_err(read)?;
    let state = RecordState::parse(&state_text).ok_or_else(|| corrupt("unknown record state"))?;
    let response = match (
        row.opt_int(5).map_err(read)?,
        row.opt_text(6).map_err(read)?,
        row.opt_bytes(7).map_err(read)?,
    ) {
        (Some(status), Some(headers), Some(body)) => {
            Some(StoredResponse::from_columns(status, &headers, body)?)
        }
        _ => None,
    };
    Ok(Record {
        scope: scope.clone(),
        key: key.clone(),
        fingerprint,
        state,
        fence: as_fence(row.int(2).map_err(read)?)?,
        owner: row.text(3).map_err(read)?,
        lease_until_ms: row.int(4).map_err(read)?,
        response,
        created_at_ms: row.int(8).map_err(read)?,
        expires_at_ms: row.int(9).map_err(read)?,
    })
}

async fn begin_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    scope: &Scope,
    key: &IdempotencyKey,
    fingerprint: &Fingerprint,
    policy: &RecordPolicy,
) -> Result<Decision, StoreError> {
    let now = now_ms();
    let owner = new_owner();
    let fingerprint_hex = fingerprint.to_hex();
    let lease_until_ms = now.saturating_add(policy.lease_ms());
    let expires_at_ms = now.saturating_add(policy.retention_ms());
    let [tenant, operation, key_text] = record_key_args(scope, key);
    let inserted = connection
        .run(
            INSERT.get::<D>(),
            &[
                tenant,
                operation,
                key_text,
                Arg::Text(&fingerprint_hex),
                Arg::Text(&owner),
                Arg::Int(lease_until_ms),
                Arg::Int(now),
                Arg::Int(expires_at_ms),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if inserted == 1 && D::KIND != SqlDialect::MySql {
        // PostgreSQL and SQLite count only the rows an `ON CONFLICT DO NOTHING` inserted: the
        // row is ours, locked by our insert, and reading it back would tell nothing new.
        return Ok(Decision::Proceed(Lease {
            scope: scope.clone(),
            key: key.clone(),
            fence: 1,
            owner,
            lease_until_ms,
            retention_ms: policy.retention_ms(),
            taken_over: false,
        }));
    }
    let row = connection
        .row(SELECT_LOCKED.get::<D>(), &record_key_args(scope, key))
        .await
        .map_err(store_error::<D>)?
        // Deleted between our insert and our read: only a concurrent purge does that.
        .ok_or_else(|| StoreError::Conflict("record vanished during begin".to_owned()))?;
    let existing = decode_record(&row, scope, key)?;
    if existing.owner == owner {
        return Ok(Decision::Proceed(Lease {
            scope: scope.clone(),
            key: key.clone(),
            fence: existing.fence,
            owner,
            lease_until_ms,
            retention_ms: policy.retention_ms(),
            taken_over: false,
        }));
    }
    // Judge by the time the row lock was obtained, not when this call started: it may have
    // waited behind the winner, whose lease began after our first reading of the clock.
    let now = now_ms();
    let lease_until_ms = now.saturating_add(policy.lease_ms());
    let expires_at_ms = now.saturating_add(policy.retention_ms());
    match judge(
        existing.state,
        &existing.fingerprint,
        existing.lease_until_ms,
        existing.expires_at_ms,
        fingerprint,
        now,
    ) {
        Verdict::Replay => existing
            .response
            .map(Decision::Replay)
            .ok_or_else(|| corrupt("completed record without a response")),
        Verdict::InFlight { retry_after_ms } => Ok(Decision::InFlight {
            retry_after: retry_after(retry_after_ms),
        }),
        Verdict::Mismatch => Ok(Decision::Mismatch),
        Verdict::TakeOver => {
            let fence = existing.fence + 1;
            let changed = connection
                .run(
                    TAKE_OVER.get::<D>(),
                    &[
                        Arg::Text(&fingerprint_hex),
                        Arg::Int(as_i64(fence)),
                        Arg::Text(&owner),
                        Arg::Int(lease_until_ms),
                        Arg::Int(now),
                        Arg::Int(expires_at_ms),
                        tenant,
                        operation,
                        key_text,
                        Arg::Int(as_i64(existing.fence)),
                    ],
                )
                .await
                .map_err(store_error::<D>)?;
            if changed != 1 {
                // The row is locked by this transaction, so the fence cannot have moved.
                return Err(StoreError::Conflict(
                    "take-over lost its row lock".to_owned(),
                ));
            }
            Ok(Decision::Proceed(Lease {
                scope: scope.clone(),
                key: key.clone(),
                fence,
                owner,
                lease_until_ms,
                retention_ms: policy.retention_ms(),
                taken_over: true,
            }))
        }
    }
}

async fn complete_on<D: Dialect>(
    connection: &mut <D::Db as Database>::Connection,
    lease: &Lease,
    response: &StoredResponse,
) -> Result<(), StoreError> {
    response.validate()?;
    let headers = response.headers_json();
    let [tenant, operation, key_text] = record_key_args(&lease.scope, &lease.key);
    let changed = connection
        .run(
            COMPLETE.get::<D>(),
            &[
                Arg::OptInt(Some(i64::from(response.status))),
                Arg::OptText(Some(&headers)),
                Arg::OptBytes(Some(&response.body)),
                Arg::Int(now_ms().saturating_add(lease.retention_ms)),
                tenant,
                operation,
                key_text,
                Arg::Int(as_i64(lease.fence)),
                Arg::Text(&lease.owner),
            ],
        )
        .await
        .map_err(store_error::<D>)?;
    if changed == 1 {
        Ok(())
    } else {
        Err(StoreError::StaleLease)
    }
}

#[async_trait]
impl<D: Dialect> RecordStore for SqlStore<D> {
    async fn begin(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
        fingerprint: &Fingerprint,
        policy: &RecordPolicy,
    ) -> Result<Decision, StoreError> {
        let _timer = timer::<D>(op::RECORD_BEGIN);
        // The cheap path first (read once, save a write): a completed record that has not
        // expired never changes, so a plain read answers a replay or a mismatch without a
        // write transaction. Anything else takes the locked path.
        if let Some(existing) = self.read_record(scope, key).await?
            && existing.state == RecordState::Completed
            && existing.expires_at_ms > now_ms()
        {
            if existing.fingerprint != *fingerprint {
                return Ok(Decision::Mismatch);
            }
            if let Some(response) = existing.response {
                // What the replay stands on must survive a failover first.
                self.fence().await?;
                return Ok(Decision::Replay(response));
            }
        }
        self.write(|transaction| {
            Box::pin(begin_on::<D>(transaction, scope, key, fingerprint, policy))
        })
        .await
    }

    async fn complete(&self, lease: &Lease, response: &StoredResponse) -> Result<(), StoreError> {
        let _timer = timer::<D>(op::RECORD_COMPLETE);
        // One conditional UPDATE is atomic on its own: no explicit transaction needed.
        retry_conflicts(|| async {
            let mut connection = self.pool().acquire().await.map_err(store_error::<D>)?;
            complete_on::<D>(&mut connection, lease, response).await
        })
        .await
    }

    async fn abandon(&self, lease: &Lease) -> Result<(), StoreError> {
        let _timer = timer::<D>(op::RECORD_ABANDON);
        let [tenant, operation, key_text] = record_key_args(&lease.scope, &lease.key);
        let changed = self
            .run_once(
                ABANDON.get::<D>(),
                &[
                    tenant,
                    operation,
                    key_text,
                    Arg::Int(as_i64(lease.fence)),
                    Arg::Text(&lease.owner),
                ],
            )
            .await?;
        if changed == 1 {
            Ok(())
        } else {
            Err(StoreError::StaleLease)
        }
    }

    async fn find_record(
        &self,
        scope: &Scope,
        key: &IdempotencyKey,
    ) -> Result<Option<Record>, StoreError> {
        let _timer = timer::<D>(op::RECORD_FIND);
        self.read_record(scope, key).await
    }

    async fn purge_expired(&self, now_ms: i64, limit: u32) -> Result<u64, StoreError> {
        let _timer = timer::<D>(op::RECORD_PURGE);
        let limit = i64::from(limit.min(PURGE_BATCH_ROWS_MAX));
        self.run_once(
            PURGE.get::<D>(),
            &[Arg::Int(now_ms), Arg::Int(now_ms), Arg::Int(limit)],
        )
        .await
    }
}
