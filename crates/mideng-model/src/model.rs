//! The transitions: every step of the service, the channel and the outside world, each one
//! atomic. A step of the service is one database transaction or one channel call, as in the
//! code; between any two of them anything else may happen, a crash included.

use crate::bounds::{AMOUNT, Bounds, PAYMENTS_MAX, REFUND_AMOUNTS, REFUNDS_MAX};
use crate::layers::{Layer, Layers};
use crate::state::{
    CloseStep, CreateStep, Event, Found, Holder, NotifyKind, OrderStatus, PaymentRow,
    PaymentStatus, Reconciler, RefundRow, RefundStatus, RefundStep, State, Trade,
};

mod moves;

/// A request the outside world sends.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Request {
    /// Creation request `i`: 0 the buyer's submission, 1 the same submission again (same
    /// token, same key), 2 a second submission (its own token and key).
    Create(u8),
    /// The merchant's close of the first payment attempt.
    Close,
    /// Refund request `r` of the paid payment, under key `r`.
    Refund(u8),
}

/// A process of the service, with steps of its own.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Process {
    /// A creation request.
    Create(u8),
    /// The merchant's close.
    Close,
    /// A refund request.
    Refund(u8),
    /// The reconciler.
    Reconciler,
}

/// One atomic transition.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub enum Action {
    /// The outside world sends a request (a crashed close or refund: sends it again).
    Submit(Request),
    /// The buyer pays trade `p` at the channel: charged.
    Pay(u8),
    /// Pending payment `p` is closed here while its code stays payable at the channel (an
    /// expiry seen here first; `close_payment`): a later charge of it is a late success.
    CloseHereOnly(u8),
    /// The channel sends another copy of a notify.
    DuplicateNotify(u8, NotifyKind),
    /// A notify copy is lost.
    LoseNotify(u8, NotifyKind),
    /// The attacker signs a success for trade `p` with the leaked key.
    Forge(u8),
    /// A process crashes between two steps.
    Crash(Process),
    /// The lock store fails over and forgets the order lock's holder.
    LoseLock,
    /// The broker delivers event `e` again.
    Redeliver(u8),
    /// The process's channel call is applied by the channel, and its answer lost.
    AnswerLost(Process),
    /// The process takes its next step.
    Step(Process),
    /// The process's wait for the order lock runs out.
    LockWaitRunsOut(Process),
    /// The lock of a crashed holder expires.
    LockExpires,
    /// A notify copy reaches the service.
    Deliver(u8, NotifyKind),
    /// The consumer handles one delivery of event `e`.
    Consume(u8),
    /// The reconciler asks the channel about pending payment `p`.
    ReconcilePayment(u8),
    /// The reconciler asks the channel about processing refund `r` (and asks for it again
    /// when the channel never received it).
    ReconcileRefund(u8),
    /// The reconciler settles what the channel said.
    ReconcileApply,
    /// The daily bill read: a trade the channel charged whose payment is neither PAID here
    /// nor a refund case goes through the success flow (`workers/bill.rs`).
    ReadBill(u8),
}

impl Action {
    /// Whether the service (its requests in flight, its workers), the channel's resends and
    /// the lock store's expiry take this step by themselves. The others are the outside
    /// world's choices and faults; quiescence is when no step of the service's own is left.
    pub fn is_system(self) -> bool {
        matches!(
            self,
            Action::Step(_)
                | Action::LockWaitRunsOut(_)
                | Action::LockExpires
                | Action::Deliver(..)
                | Action::Consume(_)
                | Action::ReconcilePayment(_)
                | Action::ReconcileRefund(_)
                | Action::ReconcileApply
                | Action::ReadBill(_)
        )
    }
}

/// The transaction failed (a unique index refused a row): rolled back whole.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Conflict;

/// What the success flow found (`SuccessOutcome`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Success {
    Paid,
    AlreadyPaid,
    /// Charged, not kept: a refund case.
    NotKept,
}

/// The payment protocol: the service with `layers` on, within `bounds`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PaymentModel {
    /// Which layers are on.
    pub layers: Layers,
    /// What may happen.
    pub bounds: Bounds,
}

impl PaymentModel {
    /// The model of the service with `layers`, within `bounds`.
    pub fn new(layers: Layers, bounds: Bounds) -> Self {
        PaymentModel { layers, bounds }
    }

    fn on(&self, layer: Layer) -> bool {
        self.layers.on(layer)
    }

    /// Runs `body` as one transaction on a copy of `state`: all of it, or (on a conflict)
    /// none of it.
    fn transaction<T>(
        state: &State,
        body: impl FnOnce(&mut State) -> Result<T, Conflict>,
    ) -> Result<(State, T), Conflict> {
        let mut next = state.clone();
        let value = body(&mut next)?;
        Ok((next, value))
    }

    /// The success flow (`store/transactions/payments.rs`, `apply_success`, by the one-PAID rule of
    /// `domain/charge.rs`): the payment's row lock, the status check, PAID, the order CREATED →
    /// PAID, a refund case when the order did not move, the `payment.succeeded` event. A charge
    /// that is not kept (the attempt failed at creation, or another payment paid the order) is
    /// a refund case, recorded here whichever path learnt of it, and a PENDING attempt closes
    /// with it.
    fn apply_success(&self, state: &mut State, p: usize) -> Result<Success, Conflict> {
        let Some(row) = state.payments[p] else {
            return Ok(Success::NotKept);
        };
        let cas = self.on(Layer::StatusCas);
        let other_paid = state.paid_payments().any(|q| q != p);
        if cas {
            match row.status {
                PaymentStatus::Paid => return Ok(Success::AlreadyPaid),
                PaymentStatus::Failed => {
                    state.cases[p] = true;
                    return Ok(Success::NotKept);
                }
                PaymentStatus::Closed | PaymentStatus::Pending if other_paid => {
                    self.close_here(state, p);
                    state.cases[p] = true;
                    return Ok(Success::NotKept);
                }
                PaymentStatus::Closed | PaymentStatus::Pending => {}
            }
        }
        if self.on(Layer::OnePaid) && other_paid {
            return Err(Conflict);
        }
        state.payments[p] = Some(PaymentRow {
            status: PaymentStatus::Paid,
            ..row
        });
        let order_moved = self.move_order(state, &[OrderStatus::Created], OrderStatus::Paid);
        if !order_moved {
            state.cases[p] = true;
        }
        state.events.push(Event {
            payment: index(p),
            order_paid: order_moved,
            queued: 1,
        });
        Ok(Success::Paid)
    }

    /// Moves the order to `to` if it is in one of `from` (with the CAS off: whatever it is).
    fn move_order(&self, state: &mut State, from: &[OrderStatus], to: OrderStatus) -> bool {
        if self.on(Layer::StatusCas) && !from.contains(&state.order) {
            return false;
        }
        state.order = to;
        true
    }

    /// Moves payment `p` to `to` if it is in `from` (with the CAS off: whatever it is); true
    /// when it moved.
    fn move_payment(
        &self,
        state: &mut State,
        p: usize,
        from: PaymentStatus,
        to: PaymentStatus,
    ) -> bool {
        let Some(row) = state.payments[p] else {
            return false;
        };
        if self.on(Layer::StatusCas) && row.status != from {
            return false;
        }
        state.payments[p] = Some(PaymentRow { status: to, ..row });
        true
    }

    /// The local half of a close (`close_on`): PENDING → CLOSED.
    fn close_here(&self, state: &mut State, p: usize) -> bool {
        self.move_payment(state, p, PaymentStatus::Pending, PaymentStatus::Closed)
    }

    /// Reconciliation's close (`expire_payment`): the local close, and the order CREATED →
    /// CANCELED when the payment closed now.
    fn expire_here(&self, state: &mut State, p: usize) {
        if self.close_here(state, p) {
            self.move_order(state, &[OrderStatus::Created], OrderStatus::Canceled);
        }
    }

    /// A refund settles (`settle_on`): CAS PROCESSING → `to`; CLOSED gives its amount back;
    /// SUCCESS completing a full refund moves the order PAID → REFUNDED.
    fn settle_refund(&self, state: &mut State, r: usize, to: RefundStatus) {
        let Some(row) = state.refunds[r] else {
            return;
        };
        if self.on(Layer::StatusCas) && row.status != RefundStatus::Processing {
            return;
        }
        state.refunds[r] = Some(RefundRow { status: to, ..row });
        let p = usize::from(row.payment);
        let Some(payment) = state.payments[p] else {
            return;
        };
        match to {
            RefundStatus::Closed => {
                state.payments[p] = Some(PaymentRow {
                    refunded: payment.refunded.saturating_sub(REFUND_AMOUNTS[r]),
                    ..payment
                });
            }
            RefundStatus::Success => {
                let left = AMOUNT.saturating_sub(payment.refunded);
                let open = (0..REFUNDS_MAX).any(|other| {
                    state.refunds[other].is_some_and(|refund| {
                        usize::from(refund.payment) == p
                            && refund.status == RefundStatus::Processing
                    })
                });
                if left == 0 && !open {
                    self.move_order(state, &[OrderStatus::Paid], OrderStatus::Refunded);
                }
            }
            RefundStatus::Processing => {}
        }
    }

    /// What the channel answers to refund `r` asked under its number, applying it: the same
    /// number again is the same refund; a trade not charged, or a refund beyond what is left,
    /// is refused.
    fn channel_refund(state: &mut State, r: usize) -> RefundStatus {
        if state.channel_refunds[r] {
            return RefundStatus::Success;
        }
        let Some(row) = state.refunds[r] else {
            return RefundStatus::Closed;
        };
        let p = usize::from(row.payment);
        let refundable = AMOUNT.saturating_sub(state.channel_refunded(p));
        if state.trades[p] != Trade::Paid || REFUND_AMOUNTS[r] > refundable {
            return RefundStatus::Closed;
        }
        state.channel_refunds[r] = true;
        RefundStatus::Success
    }

    /// The channel's close of trade `p`, applying it (a close notify for a trade that was).
    fn channel_close(state: &mut State, p: usize) -> Found {
        match state.trades[p] {
            Trade::Absent => Found::NotFound,
            Trade::Pending => {
                state.trades[p] = Trade::Closed;
                state.notifies[p][NotifyKind::Closed.index()] += 1;
                Found::Closed
            }
            Trade::Closed => Found::Closed,
            Trade::Paid => Found::Paid,
        }
    }

    /// The lock is free for `holder`.
    fn lock_free(state: &State, holder: Holder) -> bool {
        state.lock.is_none() || state.lock == Some(holder)
    }

    /// Where a process goes once it has its answer: to release the lock if it holds it.
    fn finish_create(state: &mut State, i: usize) {
        state.creates[i] = if state.lock == Some(Holder::Create(index(i))) {
            CreateStep::Unlock
        } else {
            CreateStep::Done
        };
    }

    fn finish_close(state: &mut State) {
        state.close = if state.lock == Some(Holder::Close) {
            CloseStep::Unlock
        } else {
            CloseStep::Done
        };
    }

    fn holder_crashed(state: &State, holder: Holder) -> bool {
        match holder {
            Holder::Create(i) => state.creates[usize::from(i)] == CreateStep::Crashed,
            Holder::Close => state.close == CloseStep::Crashed,
        }
    }

    fn holder_live(state: &State, holder: Holder) -> bool {
        match holder {
            Holder::Create(i) => !matches!(
                state.creates[usize::from(i)],
                CreateStep::NotSent | CreateStep::Done | CreateStep::Crashed
            ),
            Holder::Close => !matches!(
                state.close,
                CloseStep::NotSent | CloseStep::Done | CloseStep::Crashed
            ),
        }
    }

    fn process_live(state: &State, process: Process) -> bool {
        match process {
            Process::Create(i) => Self::holder_live(state, Holder::Create(i)),
            Process::Close => Self::holder_live(state, Holder::Close),
            Process::Refund(r) => !matches!(
                state.refund_requests[usize::from(r)],
                RefundStep::NotSent | RefundStep::Done | RefundStep::Crashed
            ),
            Process::Reconciler => state.reconciler != Reconciler::Idle,
        }
    }

    /// Whether the outside world can send `request` now.
    fn can_submit(state: &State, request: Request) -> bool {
        match request {
            Request::Create(0) | Request::Create(2) => {
                state.creates[request_index(request)] == CreateStep::NotSent
            }
            // The same submission again comes after the first.
            Request::Create(_) => {
                state.creates[1] == CreateStep::NotSent && state.creates[0] != CreateStep::NotSent
            }
            // The merchant closes the attempt it knows of; a crashed close is sent again.
            Request::Close => {
                matches!(state.close, CloseStep::NotSent | CloseStep::Crashed)
                    && state.payments[0].is_some()
            }
            // The merchant refunds the paid payment; a crashed refund is sent again.
            Request::Refund(r) => {
                matches!(
                    state.refund_requests[usize::from(r)],
                    RefundStep::NotSent | RefundStep::Crashed
                ) && state.paid_payments().next().is_some()
            }
        }
    }

    fn submit(&self, state: &mut State, request: Request) {
        match request {
            // The same submission again: the key is read first (`mideng/src/http/service.rs`),
            // then the token. Under the key, a second request waits for the first or replays
            // its answer, and takes the key over only from a crashed owner; then (or with no
            // key record) the token, which the first consumed, refuses it.
            Request::Create(1) => {
                let first = state.creates[0];
                let first_crashed = first == CreateStep::Crashed;
                let past_key = !self.on(Layer::Keys) || first_crashed;
                state.creates[1] = if past_key && !self.on(Layer::Tokens) {
                    CreateStep::Lock
                } else {
                    CreateStep::Done
                };
            }
            Request::Create(i) => state.creates[usize::from(i)] = CreateStep::Lock,
            Request::Close => {
                // The flow reads the payment before anything else: only a pending one is
                // closed.
                state.close = if state.status(0) == Some(PaymentStatus::Pending) {
                    CloseStep::Lock
                } else {
                    CloseStep::Done
                };
            }
            Request::Refund(r) => {
                let p = state.paid_payments().next().unwrap_or(0);
                state.refund_requests[usize::from(r)] = RefundStep::Open(index(p));
            }
        }
    }

    /// One step of creation request `i` (`flows/payment/create.rs`).
    fn step_create(&self, state: &State, i: usize) -> Option<State> {
        let me = Holder::Create(index(i));
        let mut next = state.clone();
        match state.creates[i] {
            CreateStep::Lock => {
                if self.on(Layer::OrderLock) {
                    if !Self::lock_free(state, me) {
                        return None;
                    }
                    next.lock = Some(me);
                }
                next.creates[i] = CreateStep::Open;
            }
            // `open_payment`, under the order's row lock.
            CreateStep::Open => {
                if state.order != OrderStatus::Created {
                    Self::finish_create(&mut next, i);
                    return Some(next);
                }
                let pending =
                    (0..PAYMENTS_MAX).find(|p| state.status(*p) == Some(PaymentStatus::Pending));
                match pending.filter(|_| self.on(Layer::OnePending)) {
                    Some(p) => {
                        let has_url = state.payments[p].is_some_and(|payment| payment.pay_url);
                        if has_url {
                            Self::finish_create(&mut next, i);
                        } else {
                            next.creates[i] = CreateStep::AtChannel(index(p));
                        }
                    }
                    None => match (0..PAYMENTS_MAX).find(|p| state.payments[*p].is_none()) {
                        Some(p) => {
                            next.payments[p] = Some(PaymentRow {
                                status: PaymentStatus::Pending,
                                pay_url: false,
                                refunded: 0,
                            });
                            next.creates[i] = CreateStep::AtChannel(index(p));
                        }
                        // Beyond the model's bound of attempts: the request ends here.
                        None => Self::finish_create(&mut next, i),
                    },
                }
            }
            CreateStep::AtChannel(p) => {
                let p = usize::from(p);
                next.creates[i] = match state.trades[p] {
                    Trade::Absent => {
                        next.trades[p] = Trade::Pending;
                        CreateStep::SetUrl(index(p))
                    }
                    Trade::Pending => CreateStep::SetUrl(index(p)),
                    Trade::Paid | Trade::Closed => CreateStep::Refused(index(p)),
                };
            }
            CreateStep::SetUrl(p) => {
                let p = usize::from(p);
                if let Some(row) = state.payments[p]
                    && row.status == PaymentStatus::Pending
                {
                    next.payments[p] = Some(PaymentRow {
                        pay_url: true,
                        ..row
                    });
                }
                Self::finish_create(&mut next, i);
            }
            // `settle_refused`: ask the channel, then the one `settle` table.
            CreateStep::Refused(p) => {
                let p = usize::from(p);
                let mut settled = next.clone();
                let applied = match state.trades[p] {
                    Trade::Paid => self.apply_success(&mut settled, p).map(|_| ()),
                    Trade::Closed => {
                        self.close_here(&mut settled, p);
                        Ok(())
                    }
                    Trade::Absent => {
                        self.move_payment(
                            &mut settled,
                            p,
                            PaymentStatus::Pending,
                            PaymentStatus::Failed,
                        );
                        Ok(())
                    }
                    Trade::Pending => Ok(()),
                };
                if applied.is_ok() {
                    next = settled;
                }
                Self::finish_create(&mut next, i);
            }
            CreateStep::Unlock => {
                if state.lock == Some(me) {
                    next.lock = None;
                }
                next.creates[i] = CreateStep::Done;
            }
            CreateStep::NotSent | CreateStep::Done | CreateStep::Crashed => return None,
        }
        Some(next)
    }

    /// One step of the merchant's close (`flows/payment/close.rs`).
    fn step_close(&self, state: &State) -> Option<State> {
        let me = Holder::Close;
        let mut next = state.clone();
        match state.close {
            CloseStep::Lock => {
                if self.on(Layer::OrderLock) {
                    if !Self::lock_free(state, me) {
                        return None;
                    }
                    next.lock = Some(me);
                }
                next.close = CloseStep::AtChannel;
            }
            CloseStep::AtChannel => {
                let found = Self::channel_close(&mut next, 0);
                next.close = CloseStep::Settle(found);
            }
            CloseStep::Settle(found) => {
                let mut settled = next.clone();
                let applied = match found {
                    Found::Paid => self.apply_success(&mut settled, 0).map(|_| ()),
                    Found::Closed => {
                        self.close_here(&mut settled, 0);
                        Ok(())
                    }
                    // No trade yet, and not expired: the close is deferred.
                    Found::NotFound => Ok(()),
                };
                if applied.is_ok() {
                    next = settled;
                }
                Self::finish_close(&mut next);
            }
            CloseStep::Unlock => {
                if state.lock == Some(me) {
                    next.lock = None;
                }
                next.close = CloseStep::Done;
            }
            CloseStep::NotSent | CloseStep::Done | CloseStep::Crashed => return None,
        }
        Some(next)
    }

    /// One step of refund request `r` (`flows/refund.rs`, `store/transactions/refunds.rs`).
    fn step_refund(&self, state: &State, r: usize) -> Option<State> {
        let mut next = state.clone();
        match state.refund_requests[r] {
            // `open_refund`, under the payment's row lock.
            RefundStep::Open(p) => {
                next.refund_requests[r] = RefundStep::Done;
                if let Some(existing) = state.refunds[r] {
                    if existing.status == RefundStatus::Processing {
                        next.refund_requests[r] = RefundStep::Ask;
                    }
                    return Some(next);
                }
                let pi = usize::from(p);
                let Some(payment) = state.payments[pi] else {
                    return Some(next);
                };
                if payment.status != PaymentStatus::Paid {
                    return Some(next);
                }
                let amount = REFUND_AMOUNTS[r];
                if self.on(Layer::RefundCheck) && payment.refunded + amount > AMOUNT {
                    return Some(next);
                }
                next.payments[pi] = Some(PaymentRow {
                    refunded: payment.refunded + amount,
                    ..payment
                });
                next.refunds[r] = Some(RefundRow {
                    payment: p,
                    status: RefundStatus::Processing,
                });
                next.refund_requests[r] = RefundStep::Ask;
            }
            // `ask`: a refusal is checked with a query, which finds no such refund.
            RefundStep::Ask => {
                let answer = Self::channel_refund(&mut next, r);
                next.refund_requests[r] = RefundStep::Apply(answer);
            }
            RefundStep::Apply(to) => {
                self.settle_refund(&mut next, r, to);
                next.refund_requests[r] = RefundStep::Done;
            }
            RefundStep::NotSent | RefundStep::Done | RefundStep::Crashed => return None,
        }
        Some(next)
    }

    /// A notify copy reaches the service (`flows/notify.rs`, `store/transactions/notifies.rs`): in one
    /// transaction, the dedup record of its id, then the success flow (or the close). A
    /// transaction that fails changes nothing and the copy stays: the channel sends it again.
    fn deliver(&self, state: &State, p: usize, kind: NotifyKind) -> Option<State> {
        let k = kind.index();
        let dedup = self.on(Layer::NotifyDedup);
        let applied = Self::transaction(state, |next| {
            next.notifies[p][k] -= 1;
            if dedup && state.notify_done[p][k] {
                return Ok(());
            }
            match kind {
                NotifyKind::Paid | NotifyKind::Forged => {
                    // A charge not kept is a refund case, recorded by the success flow.
                    self.apply_success(next, p)?;
                }
                NotifyKind::Closed => {
                    self.close_here(next, p);
                }
            }
            if dedup {
                next.notify_done[p][k] = true;
            }
            Ok(())
        });
        applied.ok().map(|(next, ())| next)
    }

    /// The consumer's transaction for one delivery of event `e` (`store/transactions/grants.rs`,
    /// `grant_in`): the dedup claim, the grant, the claim completed.
    fn consume(&self, state: &State, e: usize) -> State {
        let mut next = state.clone();
        let event = state.events[e];
        next.events[e].queued -= 1;
        let p = usize::from(event.payment);
        if self.on(Layer::GrantDedup) && state.grant_done[p] {
            return next;
        }
        if event.order_paid && !(self.on(Layer::GrantUnique) && state.grants[p] > 0) {
            next.grants[p] += 1;
        }
        if self.on(Layer::GrantDedup) {
            next.grant_done[p] = true;
        }
        next
    }

    /// What the reconciler's settle of payment `p` with `found` would change now.
    fn reconcile_payment(&self, state: &State, p: usize, found: Found) -> Option<State> {
        let mut next = state.clone();
        match found {
            Found::Paid => {
                self.apply_success(&mut next, p).ok()?;
            }
            Found::Closed => self.expire_here(&mut next, p),
            Found::NotFound => {}
        }
        (next != *state).then_some(next)
    }

    fn found_at_channel(state: &State, p: usize) -> Option<Found> {
        match state.trades[p] {
            Trade::Paid => Some(Found::Paid),
            Trade::Closed => Some(Found::Closed),
            // Pending, or no trade yet and not expired: left for a later round.
            Trade::Pending | Trade::Absent => None,
        }
    }

    fn processes(&self) -> Vec<Process> {
        let mut processes: Vec<Process> = (0..3).map(Process::Create).collect();
        processes.push(Process::Close);
        processes.extend((0..REFUNDS_MAX).map(|r| Process::Refund(index(r))));
        processes.push(Process::Reconciler);
        processes
    }

    /// Whether `process` is about to make a channel call whose answer can be lost.
    fn at_channel_call(state: &State, process: Process) -> bool {
        match process {
            Process::Create(i) => {
                matches!(state.creates[usize::from(i)], CreateStep::AtChannel(_))
            }
            Process::Close => state.close == CloseStep::AtChannel,
            Process::Refund(r) => state.refund_requests[usize::from(r)] == RefundStep::Ask,
            Process::Reconciler => false,
        }
    }

    /// Whether the notify of `kind` for trade `p` was ever sent, so that the channel (or, for
    /// a forged one, the attacker) can send it again.
    fn notify_sent(state: &State, p: usize, kind: NotifyKind) -> bool {
        match kind {
            NotifyKind::Paid => state.trades[p] == Trade::Paid,
            NotifyKind::Closed => state.trades[p] == Trade::Closed,
            NotifyKind::Forged => {
                state.notifies[p][kind.index()] > 0 || state.notify_done[p][kind.index()]
            }
        }
    }
}

/// A small index as stored in the state (every index of the model is below 4).
fn index(i: usize) -> u8 {
    u8::try_from(i).unwrap_or(u8::MAX)
}

fn request_index(request: Request) -> usize {
    match request {
        Request::Create(i) | Request::Refund(i) => usize::from(i),
        Request::Close => 0,
    }
}
