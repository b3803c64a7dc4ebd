//! The model as stateright explores it: the initial state, which actions are enabled in a
//! state (requests, service steps, channel steps, crashes and restarts within the bounds), and
//! the state each action leads to.

use stateright::Model;

use super::*;

impl Model for PaymentModel {
    type State = State;
    type Action = Action;

    fn init_states(&self) -> Vec<State> {
        vec![State::initial(&self.bounds)]
    }

    fn actions(&self, state: &State, actions: &mut Vec<Action>) {
        let budget = state.budget;
        // The outside world.
        let requests = [
            Request::Create(0),
            Request::Create(1),
            Request::Create(2),
            Request::Close,
        ]
        .into_iter()
        .chain((0..REFUNDS_MAX).map(|r| Request::Refund(index(r))));
        for request in requests {
            if Self::can_submit(state, request) {
                actions.push(Action::Submit(request));
            }
        }
        for p in 0..PAYMENTS_MAX {
            if state.trades[p] == Trade::Pending {
                actions.push(Action::Pay(index(p)));
            }
            if budget.local_closes > 0
                && state.payments[p].is_some_and(|row| row.status == PaymentStatus::Pending)
            {
                actions.push(Action::CloseHereOnly(index(p)));
            }
            for kind in NotifyKind::ALL {
                let copies = state.notifies[p][kind.index()];
                if budget.notify_duplicates > 0 && Self::notify_sent(state, p, kind) {
                    actions.push(Action::DuplicateNotify(index(p), kind));
                }
                if budget.notify_losses > 0 && copies > 0 {
                    actions.push(Action::LoseNotify(index(p), kind));
                }
            }
            if !self.on(Layer::ChannelKey)
                && budget.forgeries > 0
                && state.payments[p].is_some()
                && state.trades[p] != Trade::Paid
            {
                actions.push(Action::Forge(index(p)));
            }
        }
        for process in self.processes() {
            if budget.crashes > 0 && Self::process_live(state, process) {
                actions.push(Action::Crash(process));
            }
            if budget.lost_answers > 0 && Self::at_channel_call(state, process) {
                actions.push(Action::AnswerLost(process));
            }
        }
        if budget.lock_losses > 0 && state.lock.is_some_and(|h| Self::holder_live(state, h)) {
            actions.push(Action::LoseLock);
        }
        if budget.redeliveries > 0 {
            for e in 0..state.events.len() {
                actions.push(Action::Redeliver(index(e)));
            }
        }
        // The service, the channel's resends, the lock store.
        for process in self.processes() {
            if process != Process::Reconciler && Self::process_live(state, process) {
                actions.push(Action::Step(process));
            }
        }
        let waiting = |step_is_lock: bool, holder: Holder| {
            step_is_lock
                && self.on(Layer::OrderLock)
                && state.lock.is_some_and(|held| held != holder)
        };
        for i in 0..3 {
            if waiting(
                state.creates[i] == CreateStep::Lock,
                Holder::Create(index(i)),
            ) {
                actions.push(Action::LockWaitRunsOut(Process::Create(index(i))));
            }
        }
        if waiting(state.close == CloseStep::Lock, Holder::Close) {
            actions.push(Action::LockWaitRunsOut(Process::Close));
        }
        if state.lock.is_some_and(|h| Self::holder_crashed(state, h)) {
            actions.push(Action::LockExpires);
        }
        for p in 0..PAYMENTS_MAX {
            for kind in NotifyKind::ALL {
                if state.notifies[p][kind.index()] > 0 {
                    actions.push(Action::Deliver(index(p), kind));
                }
            }
        }
        for (e, event) in state.events.iter().enumerate() {
            if event.queued > 0 {
                actions.push(Action::Consume(index(e)));
            }
        }
        match state.reconciler {
            Reconciler::Idle => {
                for p in 0..PAYMENTS_MAX {
                    if state.status(p) == Some(PaymentStatus::Pending)
                        && let Some(found) = Self::found_at_channel(state, p)
                        && self.reconcile_payment(state, p, found).is_some()
                    {
                        actions.push(Action::ReconcilePayment(index(p)));
                    }
                }
                for r in 0..REFUNDS_MAX {
                    if state.refunds[r].is_some_and(|row| row.status == RefundStatus::Processing) {
                        actions.push(Action::ReconcileRefund(index(r)));
                    }
                }
            }
            Reconciler::Payment(..) | Reconciler::Refund(..) => {
                actions.push(Action::ReconcileApply);
            }
        }
        for p in 0..PAYMENTS_MAX {
            if self.bounds.bill
                && state.trades[p] == Trade::Paid
                && state.payments[p].is_some()
                && state.status(p) != Some(PaymentStatus::Paid)
                && !state.cases[p]
            {
                actions.push(Action::ReadBill(index(p)));
            }
        }
    }

    fn next_state(&self, state: &State, action: Action) -> Option<State> {
        let mut next = state.clone();
        match action {
            Action::Submit(request) => self.submit(&mut next, request),
            Action::Pay(p) => {
                let p = usize::from(p);
                next.trades[p] = Trade::Paid;
                next.notifies[p][NotifyKind::Paid.index()] += 1;
            }
            Action::CloseHereOnly(p) => {
                next.budget.local_closes -= 1;
                self.close_here(&mut next, usize::from(p));
            }
            Action::DuplicateNotify(p, kind) => {
                next.budget.notify_duplicates -= 1;
                next.notifies[usize::from(p)][kind.index()] += 1;
            }
            Action::LoseNotify(p, kind) => {
                next.budget.notify_losses -= 1;
                next.notifies[usize::from(p)][kind.index()] -= 1;
            }
            Action::Forge(p) => {
                next.budget.forgeries -= 1;
                next.notifies[usize::from(p)][NotifyKind::Forged.index()] += 1;
            }
            Action::Crash(process) => {
                next.budget.crashes -= 1;
                match process {
                    Process::Create(i) => next.creates[usize::from(i)] = CreateStep::Crashed,
                    Process::Close => next.close = CloseStep::Crashed,
                    Process::Refund(r) => {
                        next.refund_requests[usize::from(r)] = RefundStep::Crashed;
                    }
                    Process::Reconciler => next.reconciler = Reconciler::Idle,
                }
            }
            Action::LoseLock => {
                next.budget.lock_losses -= 1;
                next.lock = None;
            }
            Action::Redeliver(e) => {
                next.budget.redeliveries -= 1;
                next.events[usize::from(e)].queued += 1;
            }
            Action::AnswerLost(process) => {
                next.budget.lost_answers -= 1;
                match process {
                    Process::Create(i) => {
                        let i = usize::from(i);
                        if let CreateStep::AtChannel(p) = state.creates[i] {
                            let p = usize::from(p);
                            if next.trades[p] == Trade::Absent {
                                next.trades[p] = Trade::Pending;
                            }
                        }
                        // No definite answer: the payment stays without its pay URL.
                        Self::finish_create(&mut next, i);
                    }
                    Process::Close => {
                        Self::channel_close(&mut next, 0);
                        Self::finish_close(&mut next);
                    }
                    Process::Refund(r) => {
                        let r = usize::from(r);
                        Self::channel_refund(&mut next, r);
                        // Left PROCESSING for reconciliation.
                        next.refund_requests[r] = RefundStep::Done;
                    }
                    Process::Reconciler => return None,
                }
            }
            Action::Step(Process::Create(i)) => return self.step_create(state, usize::from(i)),
            Action::Step(Process::Close) => return self.step_close(state),
            Action::Step(Process::Refund(r)) => return self.step_refund(state, usize::from(r)),
            Action::Step(Process::Reconciler) => return None,
            Action::LockWaitRunsOut(process) => match process {
                // Creation re-checks the order without the lock, and goes on without it when
                // the order has neither a paid payment nor a pending one with its pay URL.
                Process::Create(i) => {
                    let i = usize::from(i);
                    let paid = state.paid_payments().next().is_some();
                    let pending_with_url =
                        state.payments.iter().flatten().any(|payment| {
                            payment.status == PaymentStatus::Pending && payment.pay_url
                        });
                    next.creates[i] = if paid || pending_with_url {
                        CreateStep::Done
                    } else {
                        CreateStep::Open
                    };
                }
                // The close answers busy.
                Process::Close => next.close = CloseStep::Done,
                Process::Refund(_) | Process::Reconciler => return None,
            },
            Action::LockExpires => next.lock = None,
            Action::Deliver(p, kind) => return self.deliver(state, usize::from(p), kind),
            Action::Consume(e) => return Some(self.consume(state, usize::from(e))),
            Action::ReconcilePayment(p) => {
                let found = Self::found_at_channel(state, usize::from(p))?;
                next.reconciler = Reconciler::Payment(p, found);
            }
            Action::ReconcileRefund(r) => {
                // The channel's refund, or (never received) the refund asked again.
                let answer = Self::channel_refund(&mut next, usize::from(r));
                next.reconciler = Reconciler::Refund(r, answer);
            }
            Action::ReadBill(p) => {
                return self.reconcile_payment(state, usize::from(p), Found::Paid);
            }
            Action::ReconcileApply => {
                next.reconciler = Reconciler::Idle;
                match state.reconciler {
                    Reconciler::Payment(p, found) => {
                        if let Some(settled) = self.reconcile_payment(&next, usize::from(p), found)
                        {
                            next = settled;
                        }
                    }
                    Reconciler::Refund(r, to) => self.settle_refund(&mut next, usize::from(r), to),
                    Reconciler::Idle => return None,
                }
            }
        }
        Some(next)
    }

    fn properties(&self) -> Vec<stateright::Property<Self>> {
        crate::properties::properties()
    }
}
