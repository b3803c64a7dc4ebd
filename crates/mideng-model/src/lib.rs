//! The payment protocol of `mideng-pay`, model-checked.
//!
//! An explicit-state model of the service, the channel and the outside world (the
//! [`stateright`] crate), explored exhaustively — every interleaving of every step, within
//! small [`Bounds`] — against the invariants of the storm's audit ([`properties`]). Every
//! defence of the service is a switch ([`Layer`]), so that turning one off shows what it
//! prevents, or that a deeper one holds in its place: the storm's `--break-layer`, proved for
//! the bounds instead of sampled.
//!
//! ```
//! use mideng_model::{Bounds, Layer, Layers, Until, check};
//! use mideng_model::properties::PAID_IS_CHARGED;
//!
//! let report = check(Layers::all_on(), Bounds::forgery(), Until::Exhausted, 1);
//! assert!(report.complete && report.counterexamples.is_empty());
//!
//! let leaked = check(Layers::without(&[Layer::ChannelKey]), Bounds::forgery(), Until::Exhausted, 1);
//! assert!(leaked.violated(PAID_IS_CHARGED));
//! ```
//!
//! # The model
//!
//! One order, of [`bounds::AMOUNT`] units, with up to two payment attempts (two payment
//! numbers, which are the channel's `out_trade_no`) and up to two refund requests. Its state
//! ([`state::State`]) holds the service's rows, the channel's book, the messages in flight,
//! each request's step, and what is left of each fault's budget. A step of the service is one
//! database transaction or one channel call, atomic as in the code; between any two of them
//! anything else may happen. The actions ([`Action`]), and where each is in the code
//! (`mideng-pay/src/` unless named otherwise):
//!
//! | action | what it is | code |
//! |---|---|---|
//! | `Submit(Create(0))` | the buyer's submission: through the route's token and key | `api/mod.rs`, `mideng/src/http/service.rs` |
//! | `Submit(Create(1))` | the same submission again (double click, or a retry after a timeout or crash): the key is read first (in flight: 409; answered: replay; a crashed owner: taken over), then the consumed token refuses it | `mideng/src/http/service.rs`, `mideng/src/token.rs` |
//! | `Submit(Create(2))` | a second submission with its own token and key (a second tab, a new attempt after a close) | |
//! | `Step(Create)`: lock | the order lock, waited for; `LockWaitRunsOut`: re-check the order (paid, or pending with its URL: answer; else go on without the lock) | `flows/payment/mod.rs` (`lock_order`), `create.rs` (`recheck`) |
//! | `Step(Create)`: open | one transaction under the order's row lock: a new PENDING payment, or the order's pending one (the one-pending index), or nothing for an order no longer CREATED | `store/transactions/payments.rs` (`open_on`, `insert_pending_payment`) |
//! | `Step(Create)`: at channel | `create_trade` under the payment number: created, the same again, or refused (paid or closed); `AnswerLost`: applied, no answer, no pay URL | `create.rs` (`at_channel`), `mideng-sim/src/trades.rs` (`create_trade`) |
//! | `Step(Create)`: set URL, refused | the pay URL recorded while PENDING; after a refusal, the trade queried and settled by the one table (paid: the success flow; closed: closed here; absent: FAILED) | `create.rs` (`settle_refused`, `fail`), `flows/payment/settle.rs` |
//! | `Step(Create)`: unlock | the owner-checked release | `mideng/src/lock.rs` |
//! | `Pay(p)` | the buyer pays a payable trade: charged, and its notify sent | `mideng-sim/src/trades.rs` (`pay_trade`) |
//! | `CloseHereOnly(p)` | a pending attempt closed here while its code stays payable (an expiry seen here first), so that a later charge is a late success | `store/transactions/payments.rs` (`close_on`) |
//! | `Submit(Close)`, `Step(Close)` | the merchant's close of the first attempt: read, lock (busy: answer busy), `close_trade` at the channel (closed, with a close notify; paid: the buyer won; no trade: deferred), then settle: the success flow or `close_on` | `flows/payment/close.rs`, `settle.rs` |
//! | `Deliver(p, kind)` | a notify copy, in one transaction: the dedup record of its id, then the success flow (a success not kept: a refund case) or the close; a failed transaction leaves the copy to be sent again | `flows/notify.rs`, `store/transactions/notifies.rs` (`notify_on`) |
//! | `DuplicateNotify`, `LoseNotify` | the channel's resends (concurrent or late, in any order), and a notify lost for good | `mideng-sim/src/notify/` |
//! | `Forge(p)` | with the channel key leaked: a success for a trade nobody paid, under a notify id of the attacker's | `mideng-storm/src/attacker.rs` |
//! | success flow | row lock, status check, PAID, order CREATED → PAID (else a refund case), `payment.succeeded` in the outbox, in the caller's transaction | `store/transactions/payments.rs` (`apply_success`) |
//! | `ReconcilePayment(p)`, `ReconcileApply` | a pending payment the channel calls paid or closed: the same table (closed: closed here and the order canceled) | `workers/reconcile.rs`, `store/transactions/payments.rs` (`expire_payment`) |
//! | `Submit(Refund(r))`, `Step(Refund)` | under the payment's row lock, the key's refund or a new one whose amount the running total reserves (one conditional update, behind a CHECK); then the channel under the refund number (the same number again is the same refund; beyond what is left, refused, then queried: none, so CLOSED); then the CAS settle (CLOSED gives the amount back; the SUCCESS that completes a full refund moves the order to REFUNDED) | `flows/refund.rs`, `store/transactions/refunds.rs` (`open_on`, `settle_on`) |
//! | `ReadBill(p)` | the daily bill: a trade charged at the channel whose payment is neither PAID here nor a refund case (CLOSED or FAILED here, every notify lost) goes through the success flow, in one transaction | `workers/bill.rs` |
//! | `ReconcileRefund(r)` | a PROCESSING refund: the channel's state, or (never received) asked again under its number; then the CAS settle | `flows/refund.rs` (`reconcile`) |
//! | `Consume(e)`, `Redeliver(e)` | one delivery of `payment.succeeded`, in one transaction: the dedup claim (payment number), the grant (unique payment number), the claim completed; the broker's redelivery | `workers/consumer.rs`, `store/transactions/grants.rs` (`grant_in`) |
//! | `Crash(process)` | a process loses its in-flight state between two steps; a held lock stays until `LockExpires`; a close or a refund is sent again, a creation's retry is `Create(1)` | |
//! | `LoseLock` | the lock store fails over and forgets the holder: two holders at once | `mideng/src/store/redis.rs` |
//!
//! The payment flows write no fence with their effects (the lock's fence is used by the key
//! records and dedup claims, whose `complete` runs in the same transaction as the effect), so
//! the model's lock is the owner-checked lock without fences: with it lost, both holders act,
//! and only the database stands between them. The model shows that it is enough.
//!
//! # The invariants
//!
//! [`properties`]: at most one PAID and at most one PENDING payment per order; nothing PAID
//! here that the channel did not charge, and every charge PAID here or recorded as a refund
//! case once quiescent (paid here ⇔ charged there); at most one grant per order, and a paid
//! order's grant made once quiescent; refunds never above the charge, here (the refunds not
//! CLOSED) or at the channel; the order's status agreeing with its payments. "Quiescent": no
//! step of the service's own is left (requests answered, notifies delivered or lost, events
//! consumed, nothing for reconciliation to do), whatever the outside world may still send.
//!
//! # What is abstracted away
//!
//! - Time: no expiry, so no close of an expired attempt, no "no such trade, past expiry" and no
//!   Alipay scan (a trade exists from its creation, as with WeChat Pay); reconciliation acts
//!   only on payments the channel calls paid or closed, and (to reach quiescence) only when
//!   that changes something.
//! - Money and identities: one order, amounts in units, the channel and the tenant implied;
//!   signatures, amounts and channels of notifies are assumed checked (the attacker with the
//!   key is the exception); refund notifies and ABNORMAL refunds are left out (a refund settles
//!   by its answer or by reconciliation through the same CAS).
//! - The notify's order lock: taken briefly and given up when busy, it only removes
//!   interleavings, so the model leaves it out (it has more behaviours, not fewer).
//! - A key record's owner that is alive past its lease (a pause): only a crashed owner's key
//!   is taken over. Refund cases are recorded; their automatic refunds are not modelled.
//! - The revocation consumer, webhooks and wallets.
//!
//! # Bounds
//!
//! [`Bounds`] names each check's requests and faults. In CI (a debug build, seconds each):
//! [`Bounds::duplicates`], [`Bounds::close_race`], [`Bounds::refunds`], [`Bounds::forgery`];
//! with `--ignored` in a release build: [`Bounds::creation`] (about 1.7 million states) and
//! [`Bounds::close_and_refunds`] (about 11 million).

pub mod bounds;
pub mod check;
pub mod layers;
pub mod model;
pub mod properties;
pub mod state;

pub use bounds::Bounds;
pub use check::{Counterexample, Report, Until, check};
pub use layers::{Layer, Layers};
pub use model::{Action, PaymentModel, Process, Request};
pub use stateright;
