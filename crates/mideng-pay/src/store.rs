//! The service's storage as one object-safe interface, [`PayStore`], implemented once for every
//! SQL dialect by [`SqlPay`]. Each method is one local transaction (retried whole on a transient
//! conflict), so the API above it never sees a half-done change.

use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use mideng::dedup::DedupTable;
use mideng::limits::CONFLICT_RETRIES_MAX;
use mideng::outbox::queue::SqlQueue;
use mideng::outbox::sql::{self as outbox_sql, Backlog, Relay, RelayRound, RelaySettings};
use mideng::outbox::{Publisher, Subscriber};
use mideng::record::{Decision, Lease, RecordPolicy, RecordStore, StoredResponse};
use mideng::sqlx::{Database, Pool};
use mideng::store::sql::{Dialect, SqlStore, back_off, store_error};
use mideng::{Fingerprint, IdempotencyKey, InvalidInput, Scope, StoreError, clock};

use crate::db::grants::{self, GrantRow};
use crate::db::payments::{self, OrderInsert, OrderRow, PaymentInsert, PaymentRow, SuccessOutcome};
use crate::db::wallets::{self, DeductOutcome, EntryRow};
use crate::db::{PayDialect, tenants};
use crate::domain::events::{GRANT_KIND, PaymentSucceeded};
use crate::domain::money::Amount;
use crate::domain::order::OrderStatus;
use crate::domain::payment::PaymentStatus;

/// Lease of a channel notify's dedup record. The record is written in the same transaction as
/// the effect, so the lease only matters if that transaction outlives it.
const NOTIFY_LEASE: Duration = Duration::from_secs(30);
/// Lease of an entitlement grant's dedup claim (written in the grant's own transaction).
const GRANT_LEASE: Duration = Duration::from_secs(30);
/// How long a processed `payment.succeeded` is remembered: far beyond any broker redelivery.
const GRANT_RETENTION: Duration = Duration::from_secs(30 * 24 * 3600);
/// How long a processed notify id is remembered: longer than the channels' retry schedules
/// (Alipay retries for about 25 hours, WeChat Pay for 24).
const NOTIFY_RETENTION: Duration = Duration::from_secs(3 * 24 * 3600);

/// What opening a payment attempt for an order found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum OpenPayment {
    /// No such order in this tenant.
    NoOrder,
    /// The order was paid: its paid payment.
    OrderPaid(Box<PaymentRow>),
    /// The order is in a status that takes no payment (canceled, refunded…).
    NotPayable(OrderStatus),
    /// A new pending payment.
    Created(Box<PaymentRow>),
    /// The order's pending payment, which existed already.
    ExistingPending(Box<PaymentRow>),
}

/// What an order transition request found.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum OrderTransition {
    /// No such order in this tenant.
    NoOrder,
    /// Moved from `from`.
    Applied {
        /// The status it left.
        from: OrderStatus,
    },
    /// It was in the target status already.
    AlreadyThere,
    /// Not allowed from the current status (or lost a race to another transition).
    Refused {
        /// The current status.
        current: OrderStatus,
    },
}

/// What the local half of closing a payment found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LocalClose {
    /// PENDING → CLOSED by this call.
    Closed(Box<PaymentRow>),
    /// It was closed already.
    AlreadyClosed(Box<PaymentRow>),
    /// It was paid: nothing closed.
    Paid(Box<PaymentRow>),
    /// It failed at creation: nothing to close.
    Failed(Box<PaymentRow>),
    /// No such payment.
    Unknown,
}

/// A channel's notify, verified, as the store applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyEffect {
    /// `notify.alipay` or `notify.wechat`: the dedup scope's operation.
    pub operation: &'static str,
    /// The channel whose configuration verified the notify (`alipay` or `wechat`); only a
    /// payment of that channel may be touched.
    pub channel: &'static str,
    /// The channel's id of the notify (the same on every resend).
    pub notify_id: String,
    /// Our payment number.
    pub payment_no: String,
    /// The amount the channel reports.
    pub amount_fen: i64,
    /// What happened at the channel.
    pub event: NotifyEvent,
    /// Whether the notify id is deduplicated (off only as the storm's test switch; the
    /// compare-and-set on the payment still decides).
    pub dedup: bool,
}

/// What a notify reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyEvent {
    /// Paid.
    Paid {
        /// The channel's trade number.
        channel_trade_no: String,
        /// When it was paid (Unix ms).
        paid_at_ms: i64,
    },
    /// Closed unpaid at the channel.
    Closed,
    /// Anything else: acknowledged, no change (refunds are out of scope here).
    Other,
}

/// What applying a notify did.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum NotifyOutcome {
    /// The same notify was processed before (dedup table): acknowledged, nothing changed.
    Duplicate,
    /// Processed now; the success flow's outcome when it was a payment.
    Applied(Option<SuccessOutcome>),
    /// Not ours: unknown payment, a payment of another channel, an amount mismatch, a notify
    /// id reused for another trade (the label says which). Nothing changed; the channel is
    /// told the notify is refused.
    Rejected(&'static str),
    /// A success that cannot be recorded: for an attempt that failed at creation, or for a
    /// closed attempt of an order that another payment paid already (the buyer was charged
    /// twice). Not acknowledged, so that the channel keeps telling; logged and counted for a
    /// person to refund.
    LateSuccess(PaymentStatus),
    /// The same notify id is being processed right now elsewhere: answer failure, the channel
    /// resends.
    Busy,
}

/// What applying a notify did, and to which tenant's payment (for the logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyApplied {
    /// What happened.
    pub outcome: NotifyOutcome,
    /// The payment's tenant, when the payment is ours.
    pub tenant: Option<String>,
}

pub use crate::db::wallets::CreditOutcome;

/// A wallet and its latest entries.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletView {
    /// Balance in fen.
    pub balance_fen: i64,
    /// Latest entries, newest first (at most 100).
    pub entries: Vec<EntryRow>,
}

/// Turns an outcome into the response stored with the idempotency record.
pub type Respond<'a, T> = &'a (dyn Fn(&T) -> StoredResponse + Send + Sync);

/// Whose wallet operation it is, and the idempotency record it completes in its transaction.
#[derive(Clone, Copy, Debug)]
pub enum WalletRecord<'a> {
    /// The record under this lease (its scope names the tenant) is completed with the answer.
    Lease(&'a Lease),
    /// No record: the idempotency machinery is off
    /// ([`crate::api::PaymentSettings::idempotency`], measurement only).
    Unrecorded {
        /// The tenant.
        tenant_id: &'a str,
    },
}

impl WalletRecord<'_> {
    /// The tenant.
    pub fn tenant(&self) -> &str {
        match self {
            WalletRecord::Lease(lease) => lease.scope.tenant(),
            WalletRecord::Unrecorded { tenant_id } => tenant_id,
        }
    }
}

/// The service's storage.
#[async_trait]
pub trait PayStore: Send + Sync {
    /// `postgres`, `mysql` or `sqlite`.
    fn dialect(&self) -> &'static str;
    /// The idempotency records, in the same database (so that wallet operations complete
    /// their record in their own transaction).
    fn records(&self) -> Arc<dyn RecordStore>;
    /// One round trip (readiness).
    async fn ping(&self) -> Result<(), StoreError>;
    /// Creates or re-keys a tenant.
    async fn upsert_tenant(&self, tenant_id: &str, api_key_hash: &str) -> Result<(), StoreError>;
    /// The tenant owning the key with this hash.
    async fn tenant_by_key(&self, api_key_hash: &str) -> Result<Option<String>, StoreError>;
    /// Inserts an order unless its id exists in its tenant.
    async fn create_order(&self, order: &OrderRow) -> Result<OrderInsert, StoreError>;
    /// The order and its payments.
    async fn order(
        &self,
        tenant_id: &str,
        order_id: &str,
    ) -> Result<Option<(OrderRow, Vec<PaymentRow>)>, StoreError>;
    /// Moves an order along its state machine (CAS on the current status).
    async fn transition_order(
        &self,
        tenant_id: &str,
        order_id: &str,
        to: OrderStatus,
    ) -> Result<OrderTransition, StoreError>;
    /// Creates the order's pending payment `payment` (its amount taken from the order), or
    /// finds the one that exists. The order row is locked while deciding.
    async fn open_payment(&self, payment: &PaymentRow) -> Result<OpenPayment, StoreError>;
    /// Records the channel's pay URL on a pending payment.
    async fn set_pay_url(&self, payment_no: &str, pay_url: &str) -> Result<bool, StoreError>;
    /// PENDING → FAILED (the channel refused the attempt).
    async fn fail_payment(&self, payment_no: &str) -> Result<bool, StoreError>;
    /// A payment.
    async fn payment(&self, payment_no: &str) -> Result<Option<PaymentRow>, StoreError>;
    /// The local half of closing a payment: row lock, then CAS PENDING → CLOSED.
    async fn close_payment(&self, payment_no: &str) -> Result<LocalClose, StoreError>;
    /// Pending payments created before `created_before_ms`, of one tenant or of all, oldest
    /// first, after the cursor `after` (creation time, payment number), at most `limit`
    /// (reconciliation pages through them).
    async fn pending_before(
        &self,
        tenant_id: Option<&str>,
        created_before_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<PaymentRow>, StoreError>;
    /// Closes a pending payment whose trade is over (closed or expired at the channel) and
    /// cancels its order if the order still waits for payment, in one transaction; true when
    /// the order was canceled.
    async fn expire_payment(&self, payment_no: &str) -> Result<(LocalClose, bool), StoreError>;
    /// The success flow for a trade the channel reports paid when asked (a query by
    /// reconciliation, a close refused because the buyer paid first).
    async fn apply_success(
        &self,
        payment_no: &str,
        paid: &mideng_channel::adapter::Payment,
    ) -> Result<SuccessOutcome, StoreError>;
    /// A verified notify: dedup by its id, then the success (or close) flow, in one
    /// transaction with the dedup record.
    async fn apply_notify(&self, notify: &NotifyEffect) -> Result<NotifyApplied, StoreError>;
    /// Credits a wallet (at most once per reference) and completes the record, if any, with
    /// `respond(outcome)` in one transaction, whatever the outcome.
    async fn credit(
        &self,
        record: WalletRecord<'_>,
        user_id: &str,
        amount: Amount,
        reference: &str,
        entry_no: &str,
        respond: Respond<'_, CreditOutcome>,
    ) -> Result<StoredResponse, StoreError>;
    /// Deducts from a wallet (at most once per order) and completes the record, if any, with
    /// `respond(outcome)` in one transaction, whatever the outcome.
    async fn deduct(
        &self,
        record: WalletRecord<'_>,
        user_id: &str,
        order_id: &str,
        amount: Amount,
        entry_no: &str,
        respond: Respond<'_, DeductOutcome>,
    ) -> Result<StoredResponse, StoreError>;
    /// The wallet's balance and latest entries.
    async fn wallet(&self, tenant_id: &str, user_id: &str) -> Result<WalletView, StoreError>;
    /// A relay from this database's outbox to `publisher`.
    fn relay(
        &self,
        publisher: Arc<dyn Publisher>,
        settings: RelaySettings,
    ) -> Result<Arc<dyn OutboxRelay>, InvalidInput>;
    /// The in-database queue of this database, as a publisher.
    fn queue(&self) -> Arc<dyn Publisher>;
    /// A competing consumer of `topic` on the in-database queue.
    fn queue_subscriber(
        &self,
        topic: &str,
        prefetch: u32,
        visibility: Duration,
    ) -> Result<Box<dyn Subscriber>, StoreError>;
    /// Messages of `topic` waiting in the in-database queue (delivered but unacknowledged
    /// ones included).
    async fn queue_depth(&self, topic: &str) -> Result<u64, StoreError>;
    /// Unsent outbox rows.
    async fn outbox_backlog(&self) -> Result<Backlog, StoreError>;
    /// Deletes at most `limit` outbox rows sent before `sent_before_ms`.
    async fn purge_sent_events(&self, sent_before_ms: i64, limit: u32) -> Result<u64, StoreError>;
    /// Grants what `event` asks for, claimed in the dedup table (kind `entitlement.grant`, key
    /// the payment number) in the same transaction as the grant.
    async fn grant(
        &self,
        event: &PaymentSucceeded,
        dedup: bool,
    ) -> Result<GrantOutcome, StoreError>;
    /// The user's grants, newest first (at most 100).
    async fn grants(&self, tenant_id: &str, user_id: &str) -> Result<Vec<GrantRow>, StoreError>;
}

/// One relay, whatever its dialect.
#[async_trait]
pub trait OutboxRelay: Send + Sync {
    /// One round: claim, publish, mark sent or put back.
    async fn run_once(&self) -> Result<RelayRound, StoreError>;
    /// The publisher's name.
    fn publisher(&self) -> &'static str;
}

#[async_trait]
impl<D: Dialect> OutboxRelay for Relay<D> {
    async fn run_once(&self) -> Result<RelayRound, StoreError> {
        Relay::run_once(self).await
    }

    fn publisher(&self) -> &'static str {
        Relay::publisher(self)
    }
}

/// What a `payment.succeeded` delivery did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum GrantOutcome {
    /// The grant was made (or the event asks for none), and the entry recorded as processed.
    Granted,
    /// The event asks for no grant (no entitlement, or a refund case); recorded as processed.
    NothingToGrant,
    /// Processed before: a redelivery.
    Duplicate,
    /// Another consumer holds the claim right now: deliver again later.
    Busy,
    /// No dedup entry said so, but the grant existed: the unique payment number refused a
    /// second one.
    ConstraintHeld,
}

/// [`PayStore`] on one SQL dialect.
pub struct SqlPay<D: PayDialect> {
    store: SqlStore<D>,
}

impl<D: PayDialect> std::fmt::Debug for SqlPay<D> {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "SqlPay<{}>", D::NAME)
    }
}

impl<D: PayDialect> SqlPay<D> {
    /// The service's storage on the toolkit store's pool (migrated by the caller).
    pub fn new(store: SqlStore<D>) -> Self {
        Self { store }
    }

    fn pool(&self) -> &Pool<D::Db> {
        self.store.pool()
    }
}

/// Runs `$work` (an expression using `$connection`) in its own write transaction, retrying
/// transient conflicts (deadlock victims, serialization failures, a busy SQLite file) whole,
/// with the toolkit's back-off.
macro_rules! transaction {
    ($self:ident, |$connection:ident| $work:expr) => {{
        let mut attempt = 0_u32;
        loop {
            let outcome = async {
                let mut transaction = $self.store.begin_write().await?;
                let $connection = &mut *transaction;
                let value = typed($work.await)?;
                transaction.commit().await.map_err(store_error::<D>)?;
                Ok::<_, StoreError>(value)
            }
            .await;
            match outcome {
                Err(StoreError::Conflict(_)) if attempt < CONFLICT_RETRIES_MAX => {
                    attempt += 1;
                    back_off(attempt).await;
                }
                other => break other,
            }
        }
    }};
}

/// Runs `$work` on a pooled connection outside any explicit transaction.
macro_rules! connection {
    ($self:ident, |$connection:ident| $work:expr) => {{
        let mut pooled = $self.pool().acquire().await.map_err(store_error::<D>)?;
        let $connection = &mut *pooled;
        typed($work.await)
    }};
}

/// Pins the error type of the macros' work to [`StoreError`].
fn typed<T>(result: Result<T, StoreError>) -> Result<T, StoreError> {
    result
}

fn dedup_key(notify_id: &str) -> IdempotencyKey {
    // Channel notify ids are short visible ASCII; anything else is hashed into a key.
    IdempotencyKey::parse(notify_id).unwrap_or_else(|_| {
        IdempotencyKey::parse(&Fingerprint::of_parts(&[notify_id.as_bytes()]).to_hex())
            .expect("a hex digest is a valid key")
    })
}

async fn open_on<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment: &PaymentRow,
    now_ms: i64,
) -> Result<OpenPayment, StoreError> {
    let Some(order) =
        payments::find_order::<D>(connection, &payment.tenant_id, &payment.order_id, true).await?
    else {
        return Ok(OpenPayment::NoOrder);
    };
    if !order.status.accepts_payment() {
        return Ok(
            match payments::paid_payment_for_order::<D>(
                connection,
                &payment.tenant_id,
                &payment.order_id,
            )
            .await?
            {
                Some(paid) => OpenPayment::OrderPaid(Box::new(paid)),
                None => OpenPayment::NotPayable(order.status),
            },
        );
    }
    let row = PaymentRow {
        amount_fen: order.amount_fen,
        currency: order.currency.clone(),
        ..payment.clone()
    };
    Ok(
        match payments::insert_pending_payment::<D>(connection, &row, now_ms).await? {
            PaymentInsert::Created => OpenPayment::Created(Box::new(PaymentRow {
                created_at_ms: now_ms,
                ..row
            })),
            PaymentInsert::ExistingPending(existing) => OpenPayment::ExistingPending(existing),
        },
    )
}

async fn notify_on<D: PayDialect>(
    store: &SqlStore<D>,
    connection: &mut <D::Db as Database>::Connection,
    notify: &NotifyEffect,
    now_ms: i64,
) -> Result<NotifyApplied, StoreError> {
    let Some(payment) = payments::find_payment::<D>(connection, &notify.payment_no, true).await?
    else {
        return Ok(NotifyApplied {
            outcome: NotifyOutcome::Rejected("unknown_trade"),
            tenant: None,
        });
    };
    let applied = |outcome: NotifyOutcome| -> Result<NotifyApplied, StoreError> {
        Ok(NotifyApplied {
            outcome,
            tenant: Some(payment.tenant_id.clone()),
        })
    };
    // Verified by one channel's configuration, a notify speaks only for payments made
    // through that configuration: an Alipay-signed success never settles a WeChat payment.
    // (Channel configurations are deployment-wide, one per channel, shared by the tenants, so
    // the payment's channel names both the configuration and the key that verified it.)
    if payment.channel != notify.channel {
        return applied(NotifyOutcome::Rejected("channel_mismatch"));
    }
    if payment.amount_fen != notify.amount_fen {
        return applied(NotifyOutcome::Rejected("amount_mismatch"));
    }
    let scope = Scope::new(&payment.tenant_id, notify.operation)?;
    let key = dedup_key(&notify.notify_id);
    let fingerprint = Fingerprint::of_parts(&[notify.payment_no.as_bytes()]);
    let policy = RecordPolicy::new(NOTIFY_LEASE, NOTIFY_RETENTION)?;
    let lease = if notify.dedup {
        match store
            .begin_in(connection, &scope, &key, &fingerprint, &policy)
            .await?
        {
            Decision::Proceed(lease) => Some(lease),
            Decision::Replay(_) => return applied(NotifyOutcome::Duplicate),
            Decision::InFlight { .. } => return applied(NotifyOutcome::Busy),
            Decision::Mismatch => return applied(NotifyOutcome::Rejected("notify_id_reused")),
        }
    } else {
        None
    };
    let outcome = match &notify.event {
        NotifyEvent::Paid {
            channel_trade_no,
            paid_at_ms,
        } => {
            let success = payments::apply_success::<D>(
                connection,
                &notify.payment_no,
                channel_trade_no,
                notify.amount_fen,
                *paid_at_ms,
                now_ms,
            )
            .await?;
            if let SuccessOutcome::NotPending(status) = success {
                // Not recorded as processed: the resend must find the case again.
                return applied(NotifyOutcome::LateSuccess(status));
            }
            NotifyOutcome::Applied(Some(success))
        }
        NotifyEvent::Closed => {
            if payment.status == PaymentStatus::Pending {
                payments::transition_payment::<D>(
                    connection,
                    &notify.payment_no,
                    PaymentStatus::Pending,
                    PaymentStatus::Closed,
                    now_ms,
                )
                .await?;
            }
            NotifyOutcome::Applied(None)
        }
        NotifyEvent::Other => NotifyOutcome::Applied(None),
    };
    let stored = StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: b"processed".to_vec(),
    };
    if let Some(lease) = &lease {
        store.complete_in(connection, lease, &stored).await?;
    }
    applied(outcome)
}

/// The consumer's transaction: dedup claim, grant, claim completed — all or nothing, so a
/// crash before the commit leaves neither the grant nor the claim's completion, and a crash
/// after it (before the broker ack) finds the entry done on redelivery.
async fn grant_on<D: PayDialect>(
    store: &SqlStore<D>,
    connection: &mut <D::Db as Database>::Connection,
    event: &PaymentSucceeded,
    dedup: bool,
    now_ms: i64,
) -> Result<GrantOutcome, StoreError> {
    if !dedup {
        // The storm's test switch: no claim; the grant's unique payment number still holds.
        return Ok(if event.grant().is_none() {
            GrantOutcome::NothingToGrant
        } else if grants::insert_grant::<D>(connection, event, now_ms).await? {
            GrantOutcome::Granted
        } else {
            GrantOutcome::ConstraintHeld
        });
    }
    let (scope, key, fingerprint) =
        DedupTable::<SqlStore<D>>::identity(GRANT_KIND, &event.payment_no)?;
    let policy = RecordPolicy::new(GRANT_LEASE, GRANT_RETENTION)?;
    let lease = match store
        .begin_in(connection, &scope, &key, &fingerprint, &policy)
        .await?
    {
        Decision::Proceed(lease) => lease,
        Decision::Replay(_) => return Ok(GrantOutcome::Duplicate),
        Decision::InFlight { .. } => return Ok(GrantOutcome::Busy),
        Decision::Mismatch => {
            return Err(StoreError::Corrupt(
                "a dedup entry has a foreign fingerprint".to_owned(),
            ));
        }
    };
    let outcome = if event.grant().is_none() {
        GrantOutcome::NothingToGrant
    } else if grants::insert_grant::<D>(connection, event, now_ms).await? {
        GrantOutcome::Granted
    } else {
        // The unique payment number held although the dedup row was gone (purged early):
        // the deeper guard caught a second grant.
        GrantOutcome::ConstraintHeld
    };
    let processed = StoredResponse {
        status: 200,
        headers: Vec::new(),
        body: Vec::new(),
    };
    store.complete_in(connection, &lease, &processed).await?;
    Ok(outcome)
}

/// The local half of a close: row lock, then CAS PENDING → CLOSED.
async fn close_on<D: PayDialect>(
    connection: &mut <D::Db as Database>::Connection,
    payment_no: &str,
    now_ms: i64,
) -> Result<LocalClose, StoreError> {
    let Some(payment) = payments::find_payment::<D>(connection, payment_no, true).await? else {
        return Ok(LocalClose::Unknown);
    };
    Ok(match payment.status {
        PaymentStatus::Pending => {
            payments::transition_payment::<D>(
                connection,
                payment_no,
                PaymentStatus::Pending,
                PaymentStatus::Closed,
                now_ms,
            )
            .await?;
            LocalClose::Closed(Box::new(PaymentRow {
                status: PaymentStatus::Closed,
                ..payment
            }))
        }
        PaymentStatus::Closed => LocalClose::AlreadyClosed(Box::new(payment)),
        PaymentStatus::Paid => LocalClose::Paid(Box::new(payment)),
        PaymentStatus::Failed => LocalClose::Failed(Box::new(payment)),
    })
}

#[async_trait]
impl<D: PayDialect> PayStore for SqlPay<D> {
    fn dialect(&self) -> &'static str {
        D::NAME
    }

    fn records(&self) -> Arc<dyn RecordStore> {
        Arc::new(self.store.clone())
    }

    async fn ping(&self) -> Result<(), StoreError> {
        connection!(self, |connection| async {
            mideng::store::sql::SqlConn::row(connection, "SELECT 1", &[])
                .await
                .map_err(store_error::<D>)
                .map(|_| ())
        })
    }

    async fn upsert_tenant(&self, tenant_id: &str, api_key_hash: &str) -> Result<(), StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| tenants::upsert_tenant::<D>(
            connection,
            tenant_id,
            api_key_hash,
            now_ms
        ))
    }

    async fn tenant_by_key(&self, api_key_hash: &str) -> Result<Option<String>, StoreError> {
        connection!(self, |connection| tenants::tenant_by_key::<D>(
            connection,
            api_key_hash
        ))
    }

    async fn create_order(&self, order: &OrderRow) -> Result<OrderInsert, StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| payments::insert_order::<D>(
            connection, order, now_ms
        ))
    }

    async fn order(
        &self,
        tenant_id: &str,
        order_id: &str,
    ) -> Result<Option<(OrderRow, Vec<PaymentRow>)>, StoreError> {
        connection!(self, |connection| async {
            let Some(order) =
                payments::find_order::<D>(connection, tenant_id, order_id, false).await?
            else {
                return Ok(None);
            };
            let payments =
                payments::payments_for_order::<D>(connection, tenant_id, order_id).await?;
            Ok(Some((order, payments)))
        })
    }

    async fn transition_order(
        &self,
        tenant_id: &str,
        order_id: &str,
        to: OrderStatus,
    ) -> Result<OrderTransition, StoreError> {
        use mideng::state::StateMachine;
        let now_ms = clock::now_ms();
        transaction!(self, |connection| async {
            let Some(order) =
                payments::find_order::<D>(connection, tenant_id, order_id, true).await?
            else {
                return Ok(OrderTransition::NoOrder);
            };
            if order.status == to {
                return Ok(OrderTransition::AlreadyThere);
            }
            if !OrderStatus::allows(order.status, to) {
                return Ok(OrderTransition::Refused {
                    current: order.status,
                });
            }
            let moved = payments::transition_order::<D>(
                connection,
                tenant_id,
                order_id,
                order.status,
                to,
                now_ms,
            )
            .await?;
            Ok(if moved {
                OrderTransition::Applied { from: order.status }
            } else {
                OrderTransition::Refused {
                    current: order.status,
                }
            })
        })
    }

    async fn open_payment(&self, payment: &PaymentRow) -> Result<OpenPayment, StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| open_on::<D>(connection, payment, now_ms))
    }

    async fn set_pay_url(&self, payment_no: &str, pay_url: &str) -> Result<bool, StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| payments::set_pay_url::<D>(
            connection, payment_no, pay_url, now_ms
        ))
    }

    async fn fail_payment(&self, payment_no: &str) -> Result<bool, StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| payments::transition_payment::<D>(
            connection,
            payment_no,
            PaymentStatus::Pending,
            PaymentStatus::Failed,
            now_ms
        ))
    }

    async fn payment(&self, payment_no: &str) -> Result<Option<PaymentRow>, StoreError> {
        connection!(self, |connection| payments::find_payment::<D>(
            connection, payment_no, false
        ))
    }

    async fn close_payment(&self, payment_no: &str) -> Result<LocalClose, StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| close_on::<D>(
            connection, payment_no, now_ms
        ))
    }

    async fn pending_before(
        &self,
        tenant_id: Option<&str>,
        created_before_ms: i64,
        after: Option<(i64, &str)>,
        limit: u32,
    ) -> Result<Vec<PaymentRow>, StoreError> {
        connection!(self, |connection| payments::pending_before::<D>(
            connection,
            tenant_id,
            created_before_ms,
            after,
            i64::from(limit)
        ))
    }

    async fn expire_payment(&self, payment_no: &str) -> Result<(LocalClose, bool), StoreError> {
        let now_ms = clock::now_ms();
        transaction!(self, |connection| async {
            let closed = close_on::<D>(connection, payment_no, now_ms).await?;
            let canceled = match &closed {
                LocalClose::Closed(payment) => {
                    payments::transition_order::<D>(
                        connection,
                        &payment.tenant_id,
                        &payment.order_id,
                        OrderStatus::Created,
                        OrderStatus::Canceled,
                        now_ms,
                    )
                    .await?
                }
                _ => false,
            };
            Ok((closed, canceled))
        })
    }

    async fn apply_success(
        &self,
        payment_no: &str,
        paid: &mideng_channel::adapter::Payment,
    ) -> Result<SuccessOutcome, StoreError> {
        let now_ms = clock::now_ms();
        let paid_at_ms = paid.paid_at_ms.unwrap_or(now_ms);
        transaction!(self, |connection| payments::apply_success::<D>(
            connection,
            payment_no,
            &paid.channel_trade_no,
            paid.amount_fen,
            paid_at_ms,
            now_ms
        ))
    }

    async fn apply_notify(&self, notify: &NotifyEffect) -> Result<NotifyApplied, StoreError> {
        let now_ms = clock::now_ms();
        let store = &self.store;
        transaction!(self, |connection| notify_on::<D>(
            store, connection, notify, now_ms
        ))
    }

    async fn credit(
        &self,
        record: WalletRecord<'_>,
        user_id: &str,
        amount: Amount,
        reference: &str,
        entry_no: &str,
        respond: Respond<'_, CreditOutcome>,
    ) -> Result<StoredResponse, StoreError> {
        let now_ms = clock::now_ms();
        let store = &self.store;
        let tenant_id = record.tenant();
        transaction!(self, |connection| async {
            let outcome = wallets::credit::<D>(
                connection, tenant_id, user_id, amount, reference, entry_no, now_ms,
            )
            .await?;
            let response = respond(&outcome);
            if let WalletRecord::Lease(lease) = record {
                store.complete_in(connection, lease, &response).await?;
            }
            Ok(response)
        })
    }

    async fn deduct(
        &self,
        record: WalletRecord<'_>,
        user_id: &str,
        order_id: &str,
        amount: Amount,
        entry_no: &str,
        respond: Respond<'_, DeductOutcome>,
    ) -> Result<StoredResponse, StoreError> {
        let now_ms = clock::now_ms();
        let store = &self.store;
        let tenant_id = record.tenant();
        transaction!(self, |connection| async {
            let outcome = wallets::deduct::<D>(
                connection, tenant_id, user_id, order_id, amount, entry_no, now_ms,
            )
            .await?;
            let response = respond(&outcome);
            if let WalletRecord::Lease(lease) = record {
                store.complete_in(connection, lease, &response).await?;
            }
            Ok(response)
        })
    }

    fn relay(
        &self,
        publisher: Arc<dyn Publisher>,
        settings: RelaySettings,
    ) -> Result<Arc<dyn OutboxRelay>, InvalidInput> {
        Ok(Arc::new(Relay::new(
            self.store.clone(),
            publisher,
            settings,
        )?))
    }

    fn queue(&self) -> Arc<dyn Publisher> {
        Arc::new(SqlQueue::new(self.store.clone()))
    }

    fn queue_subscriber(
        &self,
        topic: &str,
        prefetch: u32,
        visibility: Duration,
    ) -> Result<Box<dyn Subscriber>, StoreError> {
        Ok(Box::new(
            SqlQueue::new(self.store.clone()).subscribe(topic, prefetch, visibility)?,
        ))
    }

    async fn queue_depth(&self, topic: &str) -> Result<u64, StoreError> {
        SqlQueue::new(self.store.clone()).depth(topic).await
    }

    async fn outbox_backlog(&self) -> Result<Backlog, StoreError> {
        outbox_sql::backlog(&self.store).await
    }

    async fn purge_sent_events(&self, sent_before_ms: i64, limit: u32) -> Result<u64, StoreError> {
        outbox_sql::purge_sent(&self.store, sent_before_ms, limit).await
    }

    async fn grant(
        &self,
        event: &PaymentSucceeded,
        dedup: bool,
    ) -> Result<GrantOutcome, StoreError> {
        let now_ms = clock::now_ms();
        let store = &self.store;
        transaction!(self, |connection| grant_on::<D>(
            store, connection, event, dedup, now_ms
        ))
    }

    async fn grants(&self, tenant_id: &str, user_id: &str) -> Result<Vec<GrantRow>, StoreError> {
        connection!(self, |connection| grants::grants_for_user::<D>(
            connection, tenant_id, user_id
        ))
    }

    async fn wallet(&self, tenant_id: &str, user_id: &str) -> Result<WalletView, StoreError> {
        connection!(self, |connection| async {
            let (balance_fen, entries) =
                wallets::statement::<D>(connection, tenant_id, user_id).await?;
            Ok(WalletView {
                balance_fen,
                entries,
            })
        })
    }
}
