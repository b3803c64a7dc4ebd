//! The model's state: the service's database, the channel's book, the messages in flight, the
//! processes' in-flight steps, and what is left of each fault's budget.
//!
//! Indices stand for identities: payment `p` (0 or 1) is the payment number, and so the
//! channel's `out_trade_no`; refund `r` is both the refund request's key and its refund number
//! (the refund's business key makes them one to one).

use crate::bounds::{Bounds, PAYMENTS_MAX, REFUNDS_MAX};

/// The order's status (`domain/order.rs`; REFUNDING is passed through within one transaction).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum OrderStatus {
    /// Waiting for payment.
    Created,
    /// Paid.
    Paid,
    /// Canceled (reconciliation found its attempt closed at the channel).
    Canceled,
    /// Refunded in full.
    Refunded,
}

/// A payment's status (`domain/payment.rs`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum PaymentStatus {
    /// Opened, not settled.
    Pending,
    /// Paid.
    Paid,
    /// Closed unpaid.
    Closed,
    /// The channel refused its trade.
    Failed,
}

/// A payment row (`pay_payments`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct PaymentRow {
    /// Its status.
    pub status: PaymentStatus,
    /// Whether the channel's pay URL is recorded.
    pub pay_url: bool,
    /// The running total of its refunds that are not CLOSED (`refunded`).
    pub refunded: u8,
}

/// A trade at the channel, by `out_trade_no` (the simulator's `TradeBook`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Trade {
    /// The channel has no such trade.
    Absent,
    /// Created, payable.
    Pending,
    /// The buyer paid: charged.
    Paid,
    /// Closed unpaid.
    Closed,
}

/// A refund's status (`domain/refund.rs`; ABNORMAL is not modelled).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RefundStatus {
    /// Reserved on the payment, asked of the channel (or about to be).
    Processing,
    /// Refunded.
    Success,
    /// Refused: its amount given back to the payment.
    Closed,
}

/// A refund row (`pay_refunds`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct RefundRow {
    /// The refunded payment.
    pub payment: u8,
    /// Its status.
    pub status: RefundStatus,
}

/// What a channel notify reports.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum NotifyKind {
    /// The trade was paid (the channel's own notify).
    Paid,
    /// The trade was closed.
    Closed,
    /// A success signed by an attacker who holds the leaked channel key, under a notify id of
    /// the attacker's own, for a trade nobody paid.
    Forged,
}

impl NotifyKind {
    /// Every kind.
    pub const ALL: [NotifyKind; 3] = [NotifyKind::Paid, NotifyKind::Closed, NotifyKind::Forged];

    /// Its index in the per-payment arrays.
    pub fn index(self) -> usize {
        match self {
            NotifyKind::Paid => 0,
            NotifyKind::Closed => 1,
            NotifyKind::Forged => 2,
        }
    }
}

/// A `payment.succeeded` event in the outbox (written in the success flow's transaction).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Event {
    /// The paid payment.
    pub payment: u8,
    /// Whether the order moved to PAID with it (else a refund case, which asks for no grant).
    pub order_paid: bool,
    /// Deliveries waiting for the consumer.
    pub queued: u8,
}

/// A process of the service that can hold the order lock.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Holder {
    /// Creation request `i` (0: the buyer's submission, 1: its duplicate, 2: a second
    /// submission).
    Create(u8),
    /// The merchant's close.
    Close,
}

/// Where a creation request is (`flows/payment/create.rs`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CreateStep {
    /// Not sent yet.
    NotSent,
    /// Past the route's layers: taking the order lock.
    Lock,
    /// Opening the payment in one transaction (`open_payment`).
    Open,
    /// Creating payment `p`'s trade at the channel.
    AtChannel(u8),
    /// Recording `p`'s pay URL (`set_pay_url`).
    SetUrl(u8),
    /// The channel refused `p`'s trade: query it and settle (`settle_refused`).
    Refused(u8),
    /// Releasing the order lock.
    Unlock,
    /// Answered.
    Done,
    /// Crashed: its in-flight state is lost.
    Crashed,
}

/// What the channel said about a trade, as the close flow settles it.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Found {
    /// Paid: the buyer won the race.
    Paid,
    /// Closed.
    Closed,
    /// No such trade.
    NotFound,
}

/// Where the merchant's close of the first attempt is (`flows/payment/close.rs`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum CloseStep {
    /// Not sent yet.
    NotSent,
    /// Taking the order lock.
    Lock,
    /// Closing the trade at the channel.
    AtChannel,
    /// Settling what the channel said (`settle`, `OnClose::PaymentOnly`).
    Settle(Found),
    /// Releasing the order lock.
    Unlock,
    /// Answered.
    Done,
    /// Crashed.
    Crashed,
}

/// Where a refund request is (`flows/refund.rs`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum RefundStep {
    /// Not sent yet.
    NotSent,
    /// Opening the refund of payment `p` in one transaction (`open_refund`).
    Open(u8),
    /// Asking the channel under its refund number.
    Ask,
    /// Settling it as the channel said (`settle_refund`).
    Apply(RefundStatus),
    /// Answered.
    Done,
    /// Crashed (the client sends it again under the same key).
    Crashed,
}

/// What the reconciler is doing (`workers/reconcile.rs`).
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Reconciler {
    /// Between rounds.
    Idle,
    /// The channel said `Found` about pending payment `p`: settle it (`OnClose::CancelOrder`).
    Payment(u8, Found),
    /// The channel said refund `r` ended so: settle it.
    Refund(u8, RefundStatus),
}

/// What is left of each fault's budget.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Budget {
    /// Crashes left.
    pub crashes: u8,
    /// Lock losses left.
    pub lock_losses: u8,
    /// Notify copies left to add.
    pub notify_duplicates: u8,
    /// Notify losses left.
    pub notify_losses: u8,
    /// Lost channel answers left.
    pub lost_answers: u8,
    /// Event redeliveries left.
    pub redeliveries: u8,
    /// Forged notifies left.
    pub forgeries: u8,
    /// Local closes of a still payable attempt left.
    pub local_closes: u8,
}

/// Everything that exists at one moment.
#[derive(Clone, Debug, Hash, PartialEq, Eq)]
pub struct State {
    /// The order.
    pub order: OrderStatus,
    /// The payment attempts, by payment number.
    pub payments: [Option<PaymentRow>; PAYMENTS_MAX],
    /// Refund cases (`pay_refund_cases`): charges this service will not keep.
    pub cases: [bool; PAYMENTS_MAX],
    /// The refunds, by refund number (= request key).
    pub refunds: [Option<RefundRow>; REFUNDS_MAX],
    /// Notify ids applied (the dedup records), per payment and kind.
    pub notify_done: [[bool; 3]; PAYMENTS_MAX],
    /// The outbox's `payment.succeeded` events, in the order written.
    pub events: Vec<Event>,
    /// Grant rows, per payment.
    pub grants: [u8; PAYMENTS_MAX],
    /// The consumer's dedup entries, per payment.
    pub grant_done: [bool; PAYMENTS_MAX],
    /// The order lock's holder, as the lock store sees it.
    pub lock: Option<Holder>,
    /// The channel's trades, by `out_trade_no`.
    pub trades: [Trade; PAYMENTS_MAX],
    /// The channel's refunds (all immediate successes), by refund number.
    pub channel_refunds: [bool; REFUNDS_MAX],
    /// Notify copies in flight, per payment and kind (reordering: any copy may go next).
    pub notifies: [[u8; 3]; PAYMENTS_MAX],
    /// The creation requests: the buyer's submission, its duplicate, a second submission.
    pub creates: [CreateStep; 3],
    /// The merchant's close.
    pub close: CloseStep,
    /// The refund requests.
    pub refund_requests: [RefundStep; REFUNDS_MAX],
    /// The reconciler.
    pub reconciler: Reconciler,
    /// The faults left.
    pub budget: Budget,
}

impl State {
    /// The state before anything happened.
    pub fn initial(bounds: &Bounds) -> Self {
        State {
            order: OrderStatus::Created,
            payments: [None; PAYMENTS_MAX],
            cases: [false; PAYMENTS_MAX],
            refunds: [None; REFUNDS_MAX],
            notify_done: [[false; 3]; PAYMENTS_MAX],
            events: Vec::new(),
            grants: [0; PAYMENTS_MAX],
            grant_done: [false; PAYMENTS_MAX],
            lock: None,
            trades: [Trade::Absent; PAYMENTS_MAX],
            channel_refunds: [false; REFUNDS_MAX],
            notifies: [[0; 3]; PAYMENTS_MAX],
            creates: [
                CreateStep::NotSent,
                if bounds.duplicate_submission {
                    CreateStep::NotSent
                } else {
                    CreateStep::Done
                },
                if bounds.second_submission {
                    CreateStep::NotSent
                } else {
                    CreateStep::Done
                },
            ],
            close: if bounds.merchant_close {
                CloseStep::NotSent
            } else {
                CloseStep::Done
            },
            refund_requests: std::array::from_fn(|r| {
                if r < usize::from(bounds.refund_requests) {
                    RefundStep::NotSent
                } else {
                    RefundStep::Done
                }
            }),
            reconciler: Reconciler::Idle,
            budget: Budget {
                crashes: bounds.crashes,
                lock_losses: bounds.lock_losses,
                notify_duplicates: bounds.notify_duplicates,
                notify_losses: bounds.notify_losses,
                lost_answers: bounds.lost_answers,
                redeliveries: bounds.redeliveries,
                forgeries: bounds.forgeries,
                local_closes: bounds.local_closes,
            },
        }
    }

    /// The PAID payments.
    pub fn paid_payments(&self) -> impl Iterator<Item = usize> + '_ {
        (0..PAYMENTS_MAX).filter(|p| {
            self.payments[*p].is_some_and(|payment| payment.status == PaymentStatus::Paid)
        })
    }

    /// Payment `p`'s status, if it exists.
    pub fn status(&self, p: usize) -> Option<PaymentStatus> {
        self.payments[p].map(|payment| payment.status)
    }

    /// What the channel refunded of trade `p`.
    pub fn channel_refunded(&self, p: usize) -> u8 {
        self.refund_amounts(|r, refund| self.channel_refunds[r] && usize::from(refund.payment) == p)
    }

    /// The refunds here of payment `p` that are not CLOSED (what the running total must be).
    pub fn open_or_done_refunds(&self, p: usize) -> u8 {
        self.refund_amounts(|_, refund| {
            usize::from(refund.payment) == p && refund.status != RefundStatus::Closed
        })
    }

    /// The refunds here of payment `p` that succeeded.
    pub fn succeeded_refunds(&self, p: usize) -> u8 {
        self.refund_amounts(|_, refund| {
            usize::from(refund.payment) == p && refund.status == RefundStatus::Success
        })
    }

    fn refund_amounts(&self, counted: impl Fn(usize, RefundRow) -> bool) -> u8 {
        (0..REFUNDS_MAX)
            .filter_map(|r| self.refunds[r].map(|refund| (r, refund)))
            .filter(|(r, refund)| counted(*r, *refund))
            .map(|(r, _)| crate::bounds::REFUND_AMOUNTS[r])
            .sum()
    }
}
