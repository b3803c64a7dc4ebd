//! The bounds of one check: which requests the outside world may send, and how many faults of
//! each kind may happen. Exhaustive within them; nothing beyond them.
//!
//! The sizes that never change are constants: one order of [`AMOUNT`] units, at most
//! [`PAYMENTS_MAX`] payment attempts (trades at the channel), at most [`REFUNDS_MAX`] refund
//! requests, of [`REFUND_AMOUNTS`].

/// The order's amount, in units.
pub const AMOUNT: u8 = 2;
/// Payment attempts (payment numbers, which are the channel's `out_trade_no`) at most.
pub const PAYMENTS_MAX: usize = 2;
/// Refund requests at most.
pub const REFUNDS_MAX: usize = 2;
/// The amount of each refund request: a partial one and a full one, which together exceed the
/// order's amount, so that the second to arrive must be refused — or, after the first, is
/// what completes a full refund.
pub const REFUND_AMOUNTS: [u8; REFUNDS_MAX] = [1, 2];

/// What may happen in one check.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Bounds {
    /// The buyer's submission is sent twice (a double click, or a retry of a submission whose
    /// answer never came) with the same token and the same key.
    pub duplicate_submission: bool,
    /// A second submission for the order with its own token and key (a second tab, or a new
    /// attempt after a close).
    pub second_submission: bool,
    /// The merchant closes the first payment attempt, racing the buyer.
    pub merchant_close: bool,
    /// Refund requests of the paid payment (0 to [`REFUNDS_MAX`]), concurrent, each under its
    /// own key.
    pub refund_requests: u8,
    /// Processes that crash between two of their steps (their in-flight state lost; a close or
    /// a refund is then sent again, a creation's retry is the duplicate submission).
    pub crashes: u8,
    /// The order lock lost while held (a failover of the lock store): two holders at once.
    pub lock_losses: u8,
    /// Extra copies of a channel notify (the channel's resends, concurrent or late).
    pub notify_duplicates: u8,
    /// Notifies lost for good (every resend dropped).
    pub notify_losses: u8,
    /// Channel answers lost after the channel applied the call (trade creation, close, refund).
    pub lost_answers: u8,
    /// Redeliveries of a `payment.succeeded` event (a consumer crash before its ack).
    pub redeliveries: u8,
    /// Notifies an attacker signs with the leaked channel key (only with `channel-key` off).
    pub forgeries: u8,
    /// Attempts closed here while their code stays payable at the channel (an expiry seen
    /// here first): what makes a later success a late one.
    pub local_closes: u8,
    /// Whether the daily bill is read (`ReadBill`): on where a charge can go unheard. Off
    /// elsewhere, to keep the other scenarios' state spaces as they were.
    pub bill: bool,
}

impl Bounds {
    /// Nothing but the buyer's one submission, its payment and its notify.
    pub const fn quiet() -> Self {
        Bounds {
            duplicate_submission: false,
            second_submission: false,
            merchant_close: false,
            refund_requests: 0,
            crashes: 0,
            lock_losses: 0,
            notify_duplicates: 0,
            notify_losses: 0,
            lost_answers: 0,
            redeliveries: 0,
            forgeries: 0,
            local_closes: 0,
            bill: false,
        }
    }

    /// Creation under duplicates: the submission sent twice and a second submission, racing
    /// one another, with a crash, a lost lock, a duplicated and a lost notify and a redelivered
    /// event.
    pub const fn duplicates() -> Self {
        Bounds {
            duplicate_submission: true,
            second_submission: true,
            crashes: 1,
            lock_losses: 1,
            notify_duplicates: 1,
            notify_losses: 1,
            redeliveries: 1,
            ..Bounds::quiet()
        }
    }

    /// The merchant's close racing the buyer, then a second attempt: a crash, a lost channel
    /// answer, a duplicated and a lost notify.
    pub const fn close_race() -> Self {
        Bounds {
            second_submission: true,
            merchant_close: true,
            crashes: 1,
            lost_answers: 1,
            notify_duplicates: 1,
            notify_losses: 1,
            ..Bounds::quiet()
        }
    }

    /// The rare paths of two attempts (`domain/charge.rs`): the first closed here while its
    /// code stays payable, a second attempt, both paid in either order (late successes), a
    /// refund request, a duplicated notify and a redelivered event (with a notify lost for
    /// good: `late_success_unheard`, whose charge only the daily bill finds).
    pub const fn late_success() -> Self {
        Bounds {
            second_submission: true,
            local_closes: 1,
            bill: true,
            refund_requests: 1,
            notify_duplicates: 1,
            redeliveries: 1,
            ..Bounds::quiet()
        }
    }

    /// [`Bounds::late_success`] with a notify lost for good.
    pub const fn late_success_unheard() -> Self {
        Bounds {
            notify_losses: 1,
            ..Bounds::late_success()
        }
    }

    /// An attacker who holds the channel's key (it forges with `channel-key` off only), beside
    /// the buyer's submission, a duplicated notify and a redelivered event.
    pub const fn forgery() -> Self {
        Bounds {
            forgeries: 1,
            notify_duplicates: 1,
            redeliveries: 1,
            ..Bounds::quiet()
        }
    }

    /// Creation with every duplicate and fault of [`Bounds::duplicates`] and
    /// [`Bounds::close_race`] at once: larger, for a release build.
    pub const fn creation() -> Self {
        Bounds {
            duplicate_submission: true,
            second_submission: true,
            merchant_close: true,
            crashes: 1,
            lock_losses: 1,
            notify_duplicates: 1,
            notify_losses: 1,
            lost_answers: 1,
            redeliveries: 1,
            ..Bounds::quiet()
        }
    }

    /// Refunds: the order paid once, then two concurrent refunds that together exceed its
    /// amount, a crash, a lost answer, a duplicated notify and a redelivered event.
    pub const fn refunds() -> Self {
        Bounds {
            refund_requests: 2,
            crashes: 1,
            notify_duplicates: 1,
            lost_answers: 1,
            redeliveries: 1,
            ..Bounds::quiet()
        }
    }

    /// Refunds after the close race: a second submission, the merchant's close and two refund
    /// requests, with a crash, a lost answer, a duplicated and a lost notify and a redelivered
    /// event: larger, for a release build.
    pub const fn close_and_refunds() -> Self {
        Bounds {
            second_submission: true,
            merchant_close: true,
            refund_requests: 2,
            notify_losses: 1,
            crashes: 1,
            lost_answers: 1,
            notify_duplicates: 1,
            redeliveries: 1,
            ..Bounds::quiet()
        }
    }
}
