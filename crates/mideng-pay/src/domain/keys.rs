//! The two kinds of API key a tenant holds, as the payment platforms have them.
//!
//! - A **secret key** opens every route. It lives on the merchant's server and in nothing a
//!   browser sees.
//! - A **publishable key** may be shown to every visitor of a checkout page, so it opens only
//!   what a checkout does: a one-time token, an order, a payment of that order and that order's
//!   state (its grant included). It sees only the orders that a publishable key made, so a
//!   visitor who reads it off the page can neither refund, register webhooks, move wallets or
//!   list anything, nor read or pay for the merchant's other orders.
//!
//! The kind of a key is where its digest is stored (`api_key_hash` or `publishable_key_hash`),
//! never its text: a prefix is only a reminder for people.

/// What a key may open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// Every route.
    Secret,
    /// The checkout's routes only, on the orders a publishable key made.
    Publishable,
}

impl KeyKind {
    /// `secret` or `publishable`, as logs and problem details name it.
    pub fn as_str(self) -> &'static str {
        match self {
            KeyKind::Secret => "secret",
            KeyKind::Publishable => "publishable",
        }
    }

    /// The prefix of a generated key of this kind.
    pub fn prefix(self) -> &'static str {
        match self {
            KeyKind::Secret => "mdk_",
            KeyKind::Publishable => "mdk_pk_",
        }
    }
}

/// A fresh key of `kind`: its prefix and 32 random bytes in hex.
pub fn generate_key(kind: KeyKind) -> String {
    let mut bytes = [0_u8; 32];
    getrandom::fill(&mut bytes).expect("the OS random number generator is available");
    format!("{}{}", kind.prefix(), hex::encode(bytes))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn generated_keys_differ_and_say_their_kind() {
        let secret = generate_key(KeyKind::Secret);
        let publishable = generate_key(KeyKind::Publishable);
        assert!(secret.starts_with("mdk_") && !secret.starts_with("mdk_pk_"));
        assert!(publishable.starts_with("mdk_pk_"));
        assert_ne!(generate_key(KeyKind::Secret), secret);
        assert!(publishable.len() <= crate::limits::API_KEY_BYTES_MAX);
    }
}
