//! The notifies port: a verified notify is applied in one transaction with its
//! dedup record (scope: the payment's tenant and `notify.<channel>`; key: the channel's notify
//! id), so a resend finds the record and changes nothing.
//!
//! Invariants held here: a notify moves only what the matching rules
//! ([`crate::domain::notify`]) let it speak for; one notify id speaks for one payment (a notify
//! id reused for another trade is refused).

use async_trait::async_trait;
use mideng::record::{Decision, RecordPolicy, StoredResponse};
use mideng::sqlx::Database;
use mideng::store::sql::{Dialect, SqlStore};
use mideng::{Fingerprint, IdempotencyKey, Scope, StoreError};
use mideng_channel::ChannelKind;

use super::payments::{SuccessOutcome, apply_success, closed_event};
use super::refunds::{SettledRefund, settle_on};
use crate::domain::notify;
use crate::domain::payment::PaymentStatus;
use crate::domain::refund::RefundStatus;
use crate::limits::{NOTIFY_LEASE, NOTIFY_RETENTION};
use crate::store::rows::orders::{OrderFence, check_fence};
use crate::store::rows::{payments, refunds};
use crate::store::sql::SqlPay;

/// A channel's notify, verified, as the store applies it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyEffect {
    /// `notify.alipay` or `notify.wechat`: the dedup scope's operation.
    pub operation: &'static str,
    /// The channel whose configuration verified the notify; only a
    /// payment of that channel may be touched.
    pub channel: ChannelKind,
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
    /// The fence of the order's lock when the notify is applied under it (a success), checked
    /// in the notify's transaction ([`check_fence`]); `None` without the lock.
    pub fence: Option<OrderFence>,
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
    /// A refund of the payment changed state at the channel.
    Refund {
        /// Our refund number.
        out_refund_no: String,
        /// The refund's amount as the channel reports it.
        refund_fen: i64,
        /// Its state there.
        state: mideng_channel::adapter::RefundState,
    },
    /// Anything else: acknowledged, no change.
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
    /// A success that cannot be kept (the one-PAID rule): for an attempt that failed at
    /// creation, or for an attempt (closed or still pending) of an order that another payment
    /// paid already (the buyer was charged twice). Recorded as a refund case with the notify
    /// (the reconciler refunds it when automatic refunds are on); logged and counted. The
    /// attempt's status before.
    LateSuccess(PaymentStatus),
    /// The same notify id is being processed right now elsewhere: answer failure, the channel
    /// resends.
    Busy,
    /// A refund notify, applied: the status the refund moved to, or `None` when it was there
    /// already (or the notify said nothing final).
    Refund(Option<RefundStatus>),
}

/// What applying a notify did, and to which tenant's payment (for the logs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NotifyApplied {
    /// What happened.
    pub outcome: NotifyOutcome,
    /// The payment's tenant, when the payment is ours.
    pub tenant: Option<String>,
}

fn dedup_key(notify_id: &str) -> IdempotencyKey {
    // Channel notify ids are short visible ASCII; anything else is hashed into a key.
    IdempotencyKey::parse(notify_id).unwrap_or_else(|_| {
        IdempotencyKey::parse(&Fingerprint::of_parts(&[notify_id.as_bytes()]).to_hex())
            .expect("a hex digest is a valid key")
    })
}

async fn notify_on<D: Dialect>(
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
    // The matching rules ([`notify`]): a notify moves only a payment of the channel whose
    // configuration verified it, for the payment's amount, and only our refund of it.
    if let Err(refusal) = notify::speaks_for(&payment, notify.channel, notify.amount_fen) {
        return applied(NotifyOutcome::Rejected(refusal));
    }
    let refund_move = match &notify.event {
        NotifyEvent::Refund {
            out_refund_no,
            refund_fen,
            state,
        } => {
            let Some(refund) = refunds::find_refund::<D>(connection, out_refund_no, true).await?
            else {
                return applied(NotifyOutcome::Rejected("unknown_refund"));
            };
            match notify::refund_move(&refund, &notify.payment_no, *refund_fen, state) {
                Ok(change) => change,
                Err(refusal) => return applied(NotifyOutcome::Rejected(refusal)),
            }
        }
        _ => None,
    };
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
            let success = apply_success::<D>(
                connection,
                &notify.payment_no,
                channel_trade_no,
                notify.amount_fen,
                *paid_at_ms,
                now_ms,
            )
            .await?;
            match success {
                // Charged at the channel, not kept here: the success flow recorded the refund
                // case with the notify, so the notify is processed and the money goes back once.
                SuccessOutcome::Refunding { was, .. } => NotifyOutcome::LateSuccess(was),
                success => NotifyOutcome::Applied(Some(success)),
            }
        }
        NotifyEvent::Closed => {
            if payment.status == PaymentStatus::Pending
                && payments::transition_payment::<D>(
                    connection,
                    &notify.payment_no,
                    PaymentStatus::Pending,
                    PaymentStatus::Closed,
                    now_ms,
                )
                .await?
            {
                closed_event::<D>(connection, &payment, now_ms).await?;
            }
            NotifyOutcome::Applied(None)
        }
        NotifyEvent::Refund { out_refund_no, .. } => match refund_move {
            Some((to, done)) => {
                match settle_on::<D>(connection, out_refund_no, to, done, now_ms).await? {
                    SettledRefund::Moved(_) => NotifyOutcome::Refund(Some(to)),
                    SettledRefund::Unchanged(_) | SettledRefund::Unknown => {
                        NotifyOutcome::Refund(None)
                    }
                }
            }
            None => NotifyOutcome::Refund(None),
        },
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

/// Channel notifies, verified, applied once per notify id.
#[async_trait]
pub trait Notifies: Send + Sync {
    /// A verified notify: dedup by its id, then the success (or close) flow, in one
    /// transaction with the dedup record.
    async fn apply_notify(&self, notify: &NotifyEffect) -> Result<NotifyApplied, StoreError>;
}

#[async_trait]
impl<D: Dialect> Notifies for SqlPay<D> {
    async fn apply_notify(&self, notify: &NotifyEffect) -> Result<NotifyApplied, StoreError> {
        let _timer = self.timer("notifies.apply_notify");
        let now_ms = self.now_ms();
        let store = &self.store;
        self.store
            .write(|transaction| {
                Box::pin(async move {
                    let applied = notify_on::<D>(store, transaction, notify, now_ms).await?;
                    check_fence::<D>(transaction, notify.fence.as_ref()).await?;
                    Ok(applied)
                })
            })
            .await
    }
}
