//! The defences of the payment service, each a switch of the model.
//!
//! The first six carry the names of the storm's `--break-layer` (`mideng storm --break-layer
//! keys|tokens|order-lock|notify-dedup|grant-dedup|channel-key`); the others are the database's
//! own guards, which the storm cannot turn off in a running database but the model can.

use std::fmt;

/// One defence of the payment service.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq, PartialOrd, Ord)]
pub enum Layer {
    /// `keys`: the `Idempotency-Key` record on payment creation (`mideng/src/http/service.rs`):
    /// a second request under the key waits or replays while the first runs or after it
    /// answered, and takes the key over only when the first owner's lease ran out (a crash).
    Keys,
    /// `tokens`: the one-time token on payment creation (`mideng/src/token.rs`, checked after
    /// the key): the same submission sent twice is refused the second time.
    Tokens,
    /// `order-lock`: the per-order lock of creation and close (`flows/payment/mod.rs`,
    /// `lock_order`); a wait that runs out re-checks the order (creation) or answers busy
    /// (close). The payment flows write no fence with their effects.
    OrderLock,
    /// `notify-dedup`: the dedup record per channel notify id, written in the notify's
    /// transaction (`store/transactions/notifies.rs`).
    NotifyDedup,
    /// `grant-dedup`: the consumer's dedup claim per payment number, in the grant's
    /// transaction (`store/transactions/grants.rs`, `grant_in`).
    GrantDedup,
    /// `channel-key`: the channel's signing key stays secret, so only the channel can sign a
    /// notify (`mideng-channel`'s verifiers). Off, it counts as leaked: an attacker signs a
    /// success for a trade nobody paid.
    ChannelKey,
    /// The compare-and-set guards on every status move (`store/transactions/payments.rs`: `apply_success`,
    /// `close_on`, `transition_payment`; `store/rows/orders.rs`; `store/transactions/refunds.rs`, `settle_on`):
    /// a move applies only from the status it expects. Off, a move writes its target status
    /// whatever the row holds.
    StatusCas,
    /// The partial unique index `pay_payments_one_pending`: at most one PENDING payment per
    /// order; an insert that would make a second one finds the existing one instead.
    OnePending,
    /// The partial unique index `pay_payments_one_paid`: a second PAID payment for an order
    /// fails its transaction.
    OnePaid,
    /// The refunds' running total (`pay_payments.refunded`): reserved by one conditional
    /// update under the payment's row lock, behind a CHECK `refunded <= amount`.
    RefundCheck,
    /// The grant's unique payment number (`pay_grants`): the guard behind the consumer's
    /// dedup claim.
    GrantUnique,
}

impl Layer {
    /// Every layer, in a fixed order.
    pub const ALL: [Layer; 11] = [
        Layer::Keys,
        Layer::Tokens,
        Layer::OrderLock,
        Layer::NotifyDedup,
        Layer::GrantDedup,
        Layer::ChannelKey,
        Layer::StatusCas,
        Layer::OnePending,
        Layer::OnePaid,
        Layer::RefundCheck,
        Layer::GrantUnique,
    ];

    /// The layer's name: the storm's `--break-layer` value where it has one.
    pub fn name(self) -> &'static str {
        match self {
            Layer::Keys => "keys",
            Layer::Tokens => "tokens",
            Layer::OrderLock => "order-lock",
            Layer::NotifyDedup => "notify-dedup",
            Layer::GrantDedup => "grant-dedup",
            Layer::ChannelKey => "channel-key",
            Layer::StatusCas => "status-cas",
            Layer::OnePending => "one-pending",
            Layer::OnePaid => "one-paid",
            Layer::RefundCheck => "refund-check",
            Layer::GrantUnique => "grant-unique",
        }
    }

    /// The layer named `name` (as [`Layer::name`] spells it).
    pub fn parse(name: &str) -> Option<Layer> {
        Layer::ALL.into_iter().find(|layer| layer.name() == name)
    }

    fn bit(self) -> u16 {
        1 << (self as u16)
    }
}

impl fmt::Display for Layer {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(self.name())
    }
}

/// Which layers are on.
#[derive(Clone, Copy, Debug, Hash, PartialEq, Eq)]
pub struct Layers {
    off: u16,
}

impl Layers {
    /// Every layer on: the service as it is built.
    pub const fn all_on() -> Self {
        Layers { off: 0 }
    }

    /// These layers, and only these, off.
    pub fn without(layers: &[Layer]) -> Self {
        Layers {
            off: layers.iter().fold(0, |off, layer| off | layer.bit()),
        }
    }

    /// Whether `layer` is on.
    pub fn on(self, layer: Layer) -> bool {
        self.off & layer.bit() == 0
    }

    /// The layers that are off.
    pub fn off(self) -> Vec<Layer> {
        Layer::ALL
            .into_iter()
            .filter(|layer| !self.on(*layer))
            .collect()
    }
}

impl Default for Layers {
    fn default() -> Self {
        Layers::all_on()
    }
}

impl fmt::Display for Layers {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        let off = self.off();
        if off.is_empty() {
            return formatter.write_str("every layer on");
        }
        let names: Vec<&str> = off.iter().map(|layer| layer.name()).collect();
        write!(formatter, "off: {}", names.join(", "))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_parse_back() {
        for layer in Layer::ALL {
            assert_eq!(Layer::parse(layer.name()), Some(layer));
        }
        assert_eq!(Layer::parse("nothing"), None);
    }

    #[test]
    fn without_turns_off_exactly_the_named_layers() {
        let layers = Layers::without(&[Layer::OnePending, Layer::OrderLock]);
        assert_eq!(layers.off(), vec![Layer::OrderLock, Layer::OnePending]);
        assert!(layers.on(Layer::Keys));
        assert!(Layers::all_on().off().is_empty());
    }
}
