//! Trades, their refunds and the ledger: the channel's own record of what was asked, paid,
//! closed and refunded. Pure rules, no I/O.
//!
//! A trade moves along one small state machine:
//!
//! ```text
//! PENDING ──pay──► PAID ──finish──► FINISHED
//!    │               │                 │
//!    └─close/expire─►CLOSED            └──refund──► REFUNDED ◄──refund── PAID
//! ```
//!
//! Every transition is a method on [`TradeBook`] that checks the current state and changes it
//! in one call; the simulator calls them under one lock, so a close racing a payment ends in
//! exactly one of the two. Each transition that the merchant would be told about returns a
//! [`TradeEvent`] for the notify queue.
//!
//! An Alipay precreate is a trade that the channel does not show yet: it exists for queries
//! and closes only once the buyer scans (`scanned`), and its relative timeout starts then.
//!
//! **Refunds.** A paid trade keeps a book of refunds, each under the merchant's number
//! (`out_refund_no`, Alipay's `out_request_no`), partial ones included:
//!
//! ```text
//! (asked) ──Immediate──────────────────────────► SUCCESS   (Alipay, the control API)
//! (asked) ──After──► PROCESSING ──settles──────► SUCCESS | ABNORMAL | CLOSED   (WeChat Pay)
//! ```
//!
//! The same number with the same amount is that refund again, never a second one; with another
//! amount it is refused. The refunds that are not CLOSED never add up to more than the trade's
//! amount. Money moves back — a ledger entry of kind `refund` — when a refund reaches SUCCESS,
//! and the trade becomes REFUNDED when its successful refunds add up to its amount. A WeChat
//! refund's number names it across the merchant's trades (the channel's query names only the
//! refund), so it cannot be reused on another trade.

use std::collections::{BTreeSet, HashMap};

use mideng_channel::ChannelKind;
use serde::{Deserialize, Serialize};

use crate::limits::{REFUNDS_PER_TRADE_MAX, TRADES_MAX};

mod refunds;

/// Where a trade is on its state machine, channel-neutral.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum TradeStatus {
    /// Waiting for the buyer (Alipay `WAIT_BUYER_PAY`, WeChat Pay `NOTPAY`).
    Pending,
    /// Paid.
    Paid,
    /// Paid and no longer refundable (Alipay `TRADE_FINISHED`).
    Finished,
    /// Closed unpaid, by the merchant, by the control API or by expiry.
    Closed,
    /// Paid, then fully refunded.
    Refunded,
}

impl TradeStatus {
    /// Whether money moved (and has not necessarily moved back).
    pub(crate) fn was_paid(self) -> bool {
        matches!(
            self,
            TradeStatus::Paid | TradeStatus::Finished | TradeStatus::Refunded
        )
    }
}

/// Why a trade was closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "snake_case")]
pub(crate) enum CloseCause {
    /// The merchant's close call.
    Merchant,
    /// The trade's expiry passed.
    Expired,
    /// `/sim/trades/{no}/close`.
    Control,
}

/// When an unpaid trade expires.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Expiry {
    /// At this channel time, Unix milliseconds.
    At(i64),
    /// This long after the trade starts, milliseconds: the scan for Alipay (`timeout_express`),
    /// the creation for WeChat Pay.
    AfterStart(i64),
}

/// What the merchant asked for when creating the trade; a repeat with other terms is refused.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct CreateTerms {
    /// Amount in fen.
    pub(crate) amount_fen: i64,
    /// Subject (Alipay) or description (WeChat Pay).
    pub(crate) subject: String,
    /// The expiry fields exactly as sent.
    pub(crate) expiry_text: String,
}

/// One trade.
#[derive(Clone, Debug)]
pub(crate) struct Trade {
    /// Which channel holds it.
    pub(crate) channel: ChannelKind,
    /// The merchant's number.
    pub(crate) out_trade_no: String,
    /// The channel's number (Alipay `trade_no`, assigned at the scan; WeChat Pay
    /// `transaction_id`, assigned at creation and shown once paid).
    pub(crate) channel_trade_id: Option<String>,
    /// What the merchant asked for.
    pub(crate) terms: CreateTerms,
    /// Where it is.
    pub(crate) status: TradeStatus,
    /// Whether the buyer scanned the code.
    pub(crate) scanned: bool,
    /// The code the buyer scans (`qr_code`, `code_url`).
    pub(crate) pay_code: String,
    /// Where notifies go; none means no notifies.
    pub(crate) notify_url: Option<String>,
    /// Expiry rule.
    pub(crate) expiry: Expiry,
    /// When it expires, once that is known (Alipay: from the scan).
    pub(crate) expires_at_ms: Option<i64>,
    /// Channel times, Unix milliseconds.
    pub(crate) created_at_ms: i64,
    pub(crate) scanned_at_ms: Option<i64>,
    pub(crate) paid_at_ms: Option<i64>,
    pub(crate) finished_at_ms: Option<i64>,
    pub(crate) closed_at_ms: Option<i64>,
    pub(crate) refunded_at_ms: Option<i64>,
    /// Why it was closed.
    pub(crate) close_cause: Option<CloseCause>,
    /// Its refunds, oldest first: at most [`REFUNDS_PER_TRADE_MAX`] asked for by the merchant,
    /// and at most one more, the operator's refund of the rest.
    pub(crate) refunds: Vec<TradeRefund>,
}

impl Trade {
    /// Whether the channel shows the trade to queries and closes. An Alipay precreate becomes a
    /// trade only when the buyer scans; a WeChat Pay order exists at once.
    pub(crate) fn exists_at_channel(&self) -> bool {
        match self.channel {
            ChannelKind::Alipay => self.scanned,
            ChannelKind::Wechat => true,
        }
    }

    /// The refund with this number.
    pub(crate) fn find_refund(&self, out_refund_no: &str) -> Option<&TradeRefund> {
        self.refunds
            .iter()
            .find(|refund| refund.out_refund_no == out_refund_no)
    }

    /// What went back to the buyer: the sum of the successful refunds, in fen.
    pub(crate) fn refunded_fen(&self) -> i64 {
        self.refund_sum(|status| status == RefundStatus::Success)
    }

    /// What may still be refunded: the amount less every refund not closed (one processing or
    /// abnormal still holds its amount), in fen.
    pub(crate) fn refundable_fen(&self) -> i64 {
        let held_fen = self.refund_sum(|status| status != RefundStatus::Closed);
        self.terms.amount_fen.saturating_sub(held_fen)
    }

    fn refund_sum(&self, counted: impl Fn(RefundStatus) -> bool) -> i64 {
        self.refunds
            .iter()
            .filter(|refund| counted(refund.status))
            .fold(0_i64, |sum, refund| sum.saturating_add(refund.amount_fen))
    }
}

/// Where a refund is.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "SCREAMING_SNAKE_CASE")]
pub(crate) enum RefundStatus {
    /// Accepted, the money not back yet (WeChat Pay only).
    Processing,
    /// The money went back to the buyer.
    Success,
    /// Closed by the channel: no money moved, the amount is free again.
    Closed,
    /// Failed at the channel (the buyer's account frozen or closed): no money moved, and the
    /// amount stays held until a person deals with it, which the simulator does not model.
    Abnormal,
}

/// How a processing refund ends, chosen when it is accepted (`/sim/refund-outcome` picks
/// another than success for the next WeChat refund).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum RefundOutcome {
    /// SUCCESS.
    #[default]
    Success,
    /// ABNORMAL.
    Abnormal,
    /// CLOSED.
    Closed,
}

/// One refund of a trade.
#[derive(Clone, Debug)]
pub(crate) struct TradeRefund {
    /// The merchant's number (`out_refund_no`, Alipay `out_request_no`).
    pub(crate) out_refund_no: String,
    /// The channel's number (WeChat Pay `refund_id`; Alipay shows none, but the simulator's
    /// views do).
    pub(crate) refund_id: String,
    /// Amount in fen, at least one fen.
    pub(crate) amount_fen: i64,
    /// The merchant's reason, as sent.
    pub(crate) reason: String,
    /// Where it is.
    pub(crate) status: RefundStatus,
    /// Where its notifies go; none means the trade's notify URL.
    pub(crate) notify_url: Option<String>,
    /// How it ends once processed.
    pub(crate) outcome: RefundOutcome,
    /// Channel times, Unix milliseconds: asked for; processing due to end (while processing);
    /// left processing (or made at once).
    pub(crate) requested_at_ms: i64,
    pub(crate) settles_at_ms: Option<i64>,
    pub(crate) ended_at_ms: Option<i64>,
}

/// How a refund is carried out.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settlement {
    /// The money moves in the call itself (Alipay; the control API).
    Immediate,
    /// PROCESSING for `delay_ms` of channel time, then `outcome` (WeChat Pay).
    After {
        delay_ms: i64,
        outcome: RefundOutcome,
    },
}

/// A merchant's refund request.
#[derive(Clone, Debug)]
pub(crate) struct RefundRequest {
    pub(crate) out_trade_no: String,
    pub(crate) out_refund_no: String,
    /// At least one fen (the gateways refuse less before asking).
    pub(crate) amount_fen: i64,
    pub(crate) reason: String,
    pub(crate) notify_url: Option<String>,
    pub(crate) settlement: Settlement,
}

/// How a refund request was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefundTaken {
    /// A new refund.
    New,
    /// The same number and amount again: the refund made before, unchanged.
    Repeated,
}

/// Why a refund request was refused; nothing changed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum RefundRefusal {
    /// No trade has this number.
    TradeNotFound,
    /// The trade was not paid (pending, or closed unpaid).
    NotPaid,
    /// The trade is finished (Alipay `TRADE_FINISHED`): no longer refundable.
    Finished,
    /// The trade was refunded in full already.
    FullyRefunded,
    /// The refund number was used before with another amount, or (WeChat Pay) on another
    /// trade.
    NumberUsed,
    /// More than what is left to refund.
    ExceedsRefundable,
    /// The trade has [`REFUNDS_PER_TRADE_MAX`] refunds already.
    TooManyRefunds,
}

/// A change the merchant is told about.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum TradeEventKind {
    /// The buyer paid.
    Paid,
    /// An unpaid trade was closed.
    Closed,
    /// A paid trade was finished.
    Finished,
    /// A refund of the trade reached its end (success, abnormal or closed); the trade's book
    /// holds what it became.
    Refund {
        /// The refund's number.
        out_refund_no: String,
    },
}

/// A change to one trade, for the notify queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct TradeEvent {
    /// The trade.
    pub(crate) out_trade_no: String,
    /// What happened.
    pub(crate) kind: TradeEventKind,
}

/// What a create request needs.
#[derive(Clone, Debug)]
pub(crate) struct NewTrade {
    pub(crate) channel: ChannelKind,
    pub(crate) out_trade_no: String,
    pub(crate) terms: CreateTerms,
    pub(crate) notify_url: Option<String>,
    pub(crate) expiry: Expiry,
}

/// How a create request was taken.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Created {
    /// A new trade.
    New,
    /// The same request again, for a trade still waiting: the same answer.
    Repeated,
}

/// Why a create request was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum CreateRefusal {
    /// The number belongs to a paid trade.
    AlreadyPaid,
    /// The number belongs to a closed (or refunded) trade.
    AlreadyClosed,
    /// The number was used with other terms, or on the other channel.
    OtherTerms,
    /// [`TRADES_MAX`] trades exist.
    Full,
}

/// Why a transition was refused.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Refusal {
    /// No trade has this number.
    NotFound,
    /// The trade is closed (or was refunded).
    Closed,
    /// The trade was paid.
    Paid,
    /// The trade was not paid.
    NotPaid,
    /// The scan came after the trade's absolute expiry.
    Expired,
    /// The operation does not exist on this trade's channel.
    NotSupported,
    /// Nothing is left to refund: refunds still processing (or abnormal) hold the rest.
    NothingToRefund,
}

/// What a transition did.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Applied {
    /// The state changed.
    Changed,
    /// The trade was already in the target state; nothing changed.
    AlreadyDone,
}

/// One movement of money.
#[derive(Clone, Debug, Serialize)]
pub(crate) struct LedgerEntry {
    /// Position in the ledger, from 1.
    pub(crate) sequence: u64,
    /// Channel time, Unix milliseconds.
    pub(crate) at_ms: i64,
    /// `charge` or `refund`.
    pub(crate) kind: LedgerKind,
    /// Which channel.
    pub(crate) channel: ChannelKind,
    /// The merchant's number.
    pub(crate) out_trade_no: String,
    /// The channel's number.
    pub(crate) channel_trade_id: Option<String>,
    /// Amount in fen, always positive.
    pub(crate) amount_fen: i64,
    /// The merchant's refund number and the channel's (refunds only).
    pub(crate) out_refund_no: Option<String>,
    pub(crate) refund_id: Option<String>,
}

/// Direction of a ledger entry.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize)]
#[serde(rename_all = "lowercase")]
pub(crate) enum LedgerKind {
    /// The buyer paid the merchant.
    Charge,
    /// The merchant paid the buyer back.
    Refund,
}

/// All trades, their indexes and the ledger.
#[derive(Debug, Default)]
pub(crate) struct TradeBook {
    trades: HashMap<String, Trade>,
    /// Channel number → merchant number, for Alipay queries by `trade_no`.
    by_channel_trade_id: HashMap<String, String>,
    /// Pending trades by expiry time. Entries are not removed when a trade leaves PENDING;
    /// they are skipped when they come due.
    expiries: BTreeSet<(i64, String)>,
    /// Processing refunds by the time they end: (time, out_trade_no, out_refund_no).
    refund_settlements: BTreeSet<(i64, String, String)>,
    /// WeChat Pay refund number → merchant trade number: the channel's refund query names
    /// only the refund, and a number names one refund across the merchant's trades. Bounded by
    /// [`TRADES_MAX`] × [`REFUNDS_PER_TRADE_MAX`].
    wechat_refunds: HashMap<String, String>,
    ledger: Vec<LedgerEntry>,
    /// Source of channel numbers.
    sequence: u64,
}

impl TradeBook {
    /// An empty book whose channel numbers (trade, transaction and refund ids, pay codes)
    /// continue from `first`: simulators started side by side — tests sharing one database —
    /// then hand out distinct numbers, as a real channel's are unique for good.
    pub(crate) fn numbered_from(first: u64) -> Self {
        Self {
            sequence: first,
            ..Self::default()
        }
    }

    /// The trade with this merchant number.
    pub(crate) fn find_trade(&self, out_trade_no: &str) -> Option<&Trade> {
        self.trades.get(out_trade_no)
    }

    /// The trade with this channel number.
    pub(crate) fn find_trade_by_channel_trade_id(&self, channel_trade_id: &str) -> Option<&Trade> {
        self.by_channel_trade_id
            .get(channel_trade_id)
            .and_then(|out_trade_no| self.trades.get(out_trade_no))
    }

    /// The ledger, oldest first.
    pub(crate) fn ledger(&self) -> &[LedgerEntry] {
        &self.ledger
    }

    /// Creates a trade, or recognises a repeat of the same request: the same channel and the
    /// same business terms (amount, subject, expiry). The notify URL is not among them: a
    /// merchant's instances may each name their own, and the one that repeats an unanswered
    /// request must get the trade, not a refusal; the trade keeps the URL of its first request.
    pub(crate) fn create_trade(
        &mut self,
        new: NewTrade,
        now_ms: i64,
    ) -> Result<Created, CreateRefusal> {
        if let Some(existing) = self.trades.get(&new.out_trade_no) {
            return match existing.status {
                TradeStatus::Paid | TradeStatus::Finished => Err(CreateRefusal::AlreadyPaid),
                TradeStatus::Closed | TradeStatus::Refunded => Err(CreateRefusal::AlreadyClosed),
                TradeStatus::Pending
                    if existing.channel == new.channel && existing.terms == new.terms =>
                {
                    Ok(Created::Repeated)
                }
                TradeStatus::Pending => Err(CreateRefusal::OtherTerms),
            };
        }
        if self.trades.len() >= TRADES_MAX {
            return Err(CreateRefusal::Full);
        }
        let sequence = self.next_sequence();
        let (channel_trade_id, expires_at_ms, pay_code) = match new.channel {
            // The trade number and the relative timeout come with the scan.
            ChannelKind::Alipay => (
                None,
                match new.expiry {
                    Expiry::At(at_ms) => Some(at_ms),
                    Expiry::AfterStart(_) => None,
                },
                format!("https://qr.alipay.com/bax{sequence:020}"),
            ),
            ChannelKind::Wechat => {
                let expires_at_ms = match new.expiry {
                    Expiry::At(at_ms) => at_ms,
                    Expiry::AfterStart(after_ms) => now_ms.saturating_add(after_ms),
                };
                (
                    Some(format!("4200{sequence:016}{}", channel_date(now_ms))),
                    Some(expires_at_ms),
                    format!("weixin://wxpay/bizpayurl?pr=sim{sequence:012}"),
                )
            }
        };
        if let Some(id) = &channel_trade_id {
            self.by_channel_trade_id
                .insert(id.clone(), new.out_trade_no.clone());
        }
        // An Alipay precreate cannot expire before its scan: it does not exist as a trade yet.
        if new.channel == ChannelKind::Wechat
            && let Some(at_ms) = expires_at_ms
        {
            self.expiries.insert((at_ms, new.out_trade_no.clone()));
        }
        let trade = Trade {
            channel: new.channel,
            out_trade_no: new.out_trade_no.clone(),
            channel_trade_id,
            terms: new.terms,
            status: TradeStatus::Pending,
            scanned: false,
            pay_code,
            notify_url: new.notify_url,
            expiry: new.expiry,
            expires_at_ms,
            created_at_ms: now_ms,
            scanned_at_ms: None,
            paid_at_ms: None,
            finished_at_ms: None,
            closed_at_ms: None,
            refunded_at_ms: None,
            close_cause: None,
            refunds: Vec::new(),
        };
        self.trades.insert(new.out_trade_no, trade);
        Ok(Created::New)
    }

    /// The buyer scans the code. For Alipay this makes the trade exist: it gets its
    /// `trade_no`, and a relative timeout starts.
    pub(crate) fn scan_trade(
        &mut self,
        out_trade_no: &str,
        now_ms: i64,
    ) -> Result<Applied, Refusal> {
        let sequence = self.sequence.saturating_add(1);
        let trade = self.trades.get_mut(out_trade_no).ok_or(Refusal::NotFound)?;
        if trade.scanned {
            return Ok(Applied::AlreadyDone);
        }
        match trade.status {
            TradeStatus::Pending => {}
            TradeStatus::Closed | TradeStatus::Refunded => return Err(Refusal::Closed),
            TradeStatus::Paid | TradeStatus::Finished => return Err(Refusal::Paid),
        }
        if trade.channel == ChannelKind::Alipay {
            let expires_at_ms = match trade.expiry {
                Expiry::At(at_ms) => at_ms,
                Expiry::AfterStart(after_ms) => now_ms.saturating_add(after_ms),
            };
            if expires_at_ms <= now_ms {
                return Err(Refusal::Expired);
            }
            let trade_no = format!("{}2200140{sequence:013}", channel_date(now_ms));
            trade.channel_trade_id = Some(trade_no.clone());
            trade.expires_at_ms = Some(expires_at_ms);
            self.sequence = sequence;
            self.by_channel_trade_id
                .insert(trade_no, out_trade_no.to_owned());
            self.expiries
                .insert((expires_at_ms, out_trade_no.to_owned()));
        }
        trade.scanned = true;
        trade.scanned_at_ms = Some(now_ms);
        Ok(Applied::Changed)
    }

    /// The buyer pays (scanning first if needed).
    pub(crate) fn pay_trade(
        &mut self,
        out_trade_no: &str,
        now_ms: i64,
    ) -> Result<(Applied, Option<TradeEvent>), Refusal> {
        match self.scan_trade(out_trade_no, now_ms) {
            Ok(_) | Err(Refusal::Paid) => {}
            Err(refusal) => return Err(refusal),
        }
        let trade = self.trades.get_mut(out_trade_no).ok_or(Refusal::NotFound)?;
        match trade.status {
            TradeStatus::Pending => {}
            TradeStatus::Paid | TradeStatus::Finished => return Ok((Applied::AlreadyDone, None)),
            TradeStatus::Closed | TradeStatus::Refunded => return Err(Refusal::Closed),
        }
        trade.status = TradeStatus::Paid;
        trade.paid_at_ms = Some(now_ms);
        let entry = LedgerEntry {
            sequence: 0,
            at_ms: now_ms,
            kind: LedgerKind::Charge,
            channel: trade.channel,
            out_trade_no: trade.out_trade_no.clone(),
            channel_trade_id: trade.channel_trade_id.clone(),
            amount_fen: trade.terms.amount_fen,
            out_refund_no: None,
            refund_id: None,
        };
        self.append_ledger(entry);
        Ok((
            Applied::Changed,
            Some(TradeEvent {
                out_trade_no: out_trade_no.to_owned(),
                kind: TradeEventKind::Paid,
            }),
        ))
    }

    /// Closes an unpaid trade. Whether the trade must exist at the channel (scanned) is the
    /// caller's rule; this only moves PENDING to CLOSED.
    pub(crate) fn close_trade(
        &mut self,
        out_trade_no: &str,
        cause: CloseCause,
        now_ms: i64,
    ) -> Result<(Applied, Option<TradeEvent>), Refusal> {
        let trade = self.trades.get_mut(out_trade_no).ok_or(Refusal::NotFound)?;
        match trade.status {
            TradeStatus::Pending => {}
            TradeStatus::Closed => return Ok((Applied::AlreadyDone, None)),
            TradeStatus::Refunded => return Err(Refusal::Closed),
            TradeStatus::Paid | TradeStatus::Finished => return Err(Refusal::Paid),
        }
        trade.status = TradeStatus::Closed;
        trade.closed_at_ms = Some(now_ms);
        trade.close_cause = Some(cause);
        // A precreate nobody scanned was never a trade: nobody is told it closed.
        let event = trade.exists_at_channel().then(|| TradeEvent {
            out_trade_no: out_trade_no.to_owned(),
            kind: TradeEventKind::Closed,
        });
        Ok((Applied::Changed, event))
    }

    /// Marks a paid Alipay trade finished (no longer refundable).
    pub(crate) fn finish_trade(
        &mut self,
        out_trade_no: &str,
        now_ms: i64,
    ) -> Result<(Applied, Option<TradeEvent>), Refusal> {
        let trade = self.trades.get_mut(out_trade_no).ok_or(Refusal::NotFound)?;
        if trade.channel != ChannelKind::Alipay {
            return Err(Refusal::NotSupported);
        }
        match trade.status {
            TradeStatus::Paid => {}
            TradeStatus::Finished => return Ok((Applied::AlreadyDone, None)),
            TradeStatus::Pending => return Err(Refusal::NotPaid),
            TradeStatus::Closed | TradeStatus::Refunded => return Err(Refusal::Closed),
        }
        trade.status = TradeStatus::Finished;
        trade.finished_at_ms = Some(now_ms);
        Ok((
            Applied::Changed,
            Some(TradeEvent {
                out_trade_no: out_trade_no.to_owned(),
                kind: TradeEventKind::Finished,
            }),
        ))
    }

    /// Closes every pending trade whose expiry is at or before `now_ms`.
    pub(crate) fn expire_due_trades(&mut self, now_ms: i64) -> Vec<TradeEvent> {
        let mut events = Vec::new();
        while let Some((at_ms, _)) = self.expiries.first()
            && *at_ms <= now_ms
        {
            let Some((at_ms, out_trade_no)) = self.expiries.pop_first() else {
                break;
            };
            // A trade can leave PENDING (paid, closed) while its entry stays in the index, and
            // close_trade refuses anything but PENDING; a refusal here is that, not an error.
            if let Ok((Applied::Changed, event)) =
                self.close_trade(&out_trade_no, CloseCause::Expired, at_ms)
            {
                events.extend(event);
            }
        }
        events
    }

    /// The next expiry, for the dispatcher's timer.
    pub(crate) fn next_expiry_ms(&self) -> Option<i64> {
        self.expiries.first().map(|(at_ms, _)| *at_ms)
    }

    fn next_sequence(&mut self) -> u64 {
        self.sequence = self.sequence.saturating_add(1);
        self.sequence
    }

    /// Every trade, for tests that check the book's invariants.
    #[cfg(test)]
    fn all_trades(&self) -> impl Iterator<Item = &Trade> {
        self.trades.values()
    }

    /// The sequence number the next ledger entry gets, from 1.
    fn next_ledger_sequence(&self) -> u64 {
        u64::try_from(self.ledger.len())
            .unwrap_or(u64::MAX)
            .saturating_add(1)
    }

    fn append_ledger(&mut self, mut entry: LedgerEntry) {
        entry.sequence = self.next_ledger_sequence();
        self.ledger.push(entry);
    }
}

/// `yyyyMMdd` of a channel time in Beijing time, the date prefix of channel numbers.
fn channel_date(now_ms: i64) -> String {
    mideng_channel::alipay::format_timestamp(now_ms)
        .chars()
        .filter(char::is_ascii_digit)
        .take(8)
        .collect()
}

#[cfg(test)]
mod tests;
