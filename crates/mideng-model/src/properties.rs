//! The invariants, as the storm's audit states them, and a few examples that
//! show the bounded check reaches the states that matter.
//!
//! Safety invariants hold in every state. The two that need the system to have settled (a
//! charge whose notify is still in flight is not PAID yet; a paid order's event may not be
//! consumed yet) are checked in every *quiescent* state: one in which no step of the
//! service's own is left — no request in flight, no notify copy that would change anything, no
//! event queued, nothing for reconciliation to do — whatever the outside world may still send.

use stateright::{Model, Property};

use crate::bounds::{AMOUNT, PAYMENTS_MAX};
use crate::model::PaymentModel;
use crate::state::{OrderStatus, PaymentStatus, State, Trade};

/// At most one PAID payment per order.
pub const ONE_PAID: &str = "at most one PAID payment per order";
/// At most one PENDING payment per order.
pub const ONE_PENDING: &str = "at most one PENDING payment per order";
/// Nothing PAID here that the channel did not charge (paid here ⇒ charged there).
pub const PAID_IS_CHARGED: &str = "nothing PAID here that the channel did not charge";
/// Every charge PAID here or recorded as a refund case, once quiescent (charged there ⇒ paid
/// here).
pub const CHARGED_IS_PAID: &str = "every charge PAID here or a refund case, once quiescent";
/// At most one grant per order.
pub const ONE_GRANT: &str = "at most one grant per order";
/// A paid order has its grant, once quiescent.
pub const PAID_IS_GRANTED: &str = "a paid order has its grant, once quiescent";
/// Refunds never exceed the charge, here or at the channel.
pub const REFUNDS_WITHIN_CHARGE: &str = "refunds never exceed the charge";
/// The order's status agrees with its payments and refunds.
pub const ORDER_AGREES: &str = "the order's status agrees with its payments";

/// Example: the order was paid.
pub const EXAMPLE_PAID: &str = "example: the order paid";
/// Example: the merchant's close won the race at the channel.
pub const EXAMPLE_CLOSED: &str = "example: a trade closed at the channel";
/// Example: the order was refunded in full.
pub const EXAMPLE_REFUNDED: &str = "example: the order refunded in full";
/// Example: a second payment attempt was opened.
pub const EXAMPLE_SECOND_ATTEMPT: &str = "example: a second payment attempt";

/// The invariants, which must never fail.
pub const INVARIANTS: [&str; 8] = [
    ONE_PAID,
    ONE_PENDING,
    PAID_IS_CHARGED,
    CHARGED_IS_PAID,
    ONE_GRANT,
    PAID_IS_GRANTED,
    REFUNDS_WITHIN_CHARGE,
    ORDER_AGREES,
];

/// Every property of the model.
pub fn properties() -> Vec<Property<PaymentModel>> {
    vec![
        Property::<PaymentModel>::always(ONE_PAID, |_, state| state.paid_payments().count() <= 1),
        Property::<PaymentModel>::always(ONE_PENDING, |_, state| {
            state
                .payments
                .iter()
                .flatten()
                .filter(|payment| payment.status == PaymentStatus::Pending)
                .count()
                <= 1
        }),
        Property::<PaymentModel>::always(PAID_IS_CHARGED, |_, state| {
            state
                .paid_payments()
                .all(|p| state.trades[p] == Trade::Paid)
        }),
        Property::<PaymentModel>::always(CHARGED_IS_PAID, |model, state| {
            // The cheap check first: quiescence is asked only where it would matter.
            charges_accounted(state) || !model.quiescent(state)
        }),
        Property::<PaymentModel>::always(ONE_GRANT, |_, state| {
            state
                .grants
                .iter()
                .map(|grants| u32::from(*grants))
                .sum::<u32>()
                <= 1
        }),
        Property::<PaymentModel>::always(PAID_IS_GRANTED, |model, state| {
            paid_is_granted(state) || !model.quiescent(state)
        }),
        Property::<PaymentModel>::always(REFUNDS_WITHIN_CHARGE, |_, state| {
            (0..PAYMENTS_MAX).all(|p| {
                state.open_or_done_refunds(p) <= AMOUNT && state.channel_refunded(p) <= AMOUNT
            })
        }),
        Property::<PaymentModel>::always(ORDER_AGREES, |_, state| order_agrees(state)),
        Property::<PaymentModel>::sometimes(EXAMPLE_PAID, |_, state| {
            state.order == OrderStatus::Paid
        }),
        Property::<PaymentModel>::sometimes(EXAMPLE_CLOSED, |_, state| {
            state.trades.contains(&Trade::Closed)
        }),
        Property::<PaymentModel>::sometimes(EXAMPLE_REFUNDED, |_, state| {
            state.order == OrderStatus::Refunded
        }),
        Property::<PaymentModel>::sometimes(EXAMPLE_SECOND_ATTEMPT, |_, state| {
            state.payments.iter().all(Option::is_some)
        }),
    ]
}

impl PaymentModel {
    /// Whether no step of the service's own is left: every system action changes nothing.
    pub fn quiescent(&self, state: &State) -> bool {
        let mut actions = Vec::new();
        self.actions(state, &mut actions);
        actions
            .into_iter()
            .filter(|action| action.is_system())
            .all(|action| {
                self.next_state(state, action)
                    .is_none_or(|next| next == *state)
            })
    }
}

/// Every trade the channel charged is PAID here, or recorded as a refund case.
fn charges_accounted(state: &State) -> bool {
    (0..PAYMENTS_MAX).all(|p| {
        state.trades[p] != Trade::Paid
            || state.status(p) == Some(PaymentStatus::Paid)
            || state.cases[p]
    })
}

/// A payment whose success moved the order to PAID has a grant.
fn paid_is_granted(state: &State) -> bool {
    let asked = state.events.iter().any(|event| event.order_paid);
    !asked || state.grants.iter().any(|grants| *grants > 0)
}

/// PAID: a PAID payment not refunded in full. REFUNDED: a PAID payment refunded in full.
/// CREATED: no PAID payment. CANCELED: every PAID payment a refund case.
fn order_agrees(state: &State) -> bool {
    let refunded_in_full = |p: usize| state.succeeded_refunds(p) >= AMOUNT;
    match state.order {
        OrderStatus::Created => state.paid_payments().next().is_none(),
        OrderStatus::Paid => state.paid_payments().any(|p| !refunded_in_full(p)),
        OrderStatus::Refunded => state.paid_payments().any(refunded_in_full),
        OrderStatus::Canceled => state.paid_payments().all(|p| state.cases[p]),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::bounds::Bounds;
    use crate::layers::Layers;

    #[test]
    fn the_initial_state_is_quiescent_and_holds_every_invariant() {
        let model = PaymentModel::new(Layers::all_on(), Bounds::quiet());
        let state = State::initial(&model.bounds);
        assert!(model.quiescent(&state));
        for property in properties() {
            if INVARIANTS.contains(&property.name) {
                assert!((property.condition)(&model, &state), "{}", property.name);
            }
        }
    }
}
