//! The two kinds of API key a tenant holds, as the payment platforms have them, and the
//! client secret that binds a page to one order. **The server prices, the page pays.**
//!
//! ```text
//! merchant's server ──secret key──► POST /v1/orders {amount, currency, entitlement, user}
//!        │                              ◄── 201 {…, client_secret}   (bound to that order)
//!        │ hands the page its order id and client secret
//!        ▼
//! checkout page ──publishable key + Mideng-Client-Secret──► POST /v1/tokens
//!                                                          POST /v1/orders/{id}/payments
//!                                                          GET  /v1/orders/{id}
//!                                                          GET  /v1/entitlements?order_id={id}
//! ```
//!
//! - A **secret key** opens every route. It lives on the merchant's server and in nothing a
//!   browser sees. It alone makes orders: it sets the amount, the currency, the grant and the
//!   buyer.
//! - A **publishable key** may be shown to every visitor of a checkout page. It opens nothing by
//!   itself: with an order's **client secret** it takes a one-time token for that order, pays
//!   that order and reads that order's state and grant, and nothing else. A visitor who reads
//!   both off the page can pay the order the merchant priced, no other, and never a price of
//!   their own.
//! - What a page does lives apart from what the server does ([`Principal`]): its idempotency
//!   records and its tokens are scoped by the order it pays ([`scope_tenant`]), its tokens come
//!   from a store of their own with caps of their own, so nothing a visitor sends replays,
//!   poisons or exhausts what the merchant's server uses.
//!
//! The kind of a key is where its digest is stored (`api_key_hash` or `publishable_key_hash`),
//! never its text: a prefix is only a reminder for people.

use sha2::{Digest, Sha256};

/// What a key may open.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum KeyKind {
    /// Every route.
    Secret,
    /// The checkout's routes only, each with an order's client secret, on that order alone.
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

/// Whether `tenant`, the tenant part of a toolkit scope, is a page's ([`scope_tenant`]).
pub fn is_page_scope(tenant: &str) -> bool {
    tenant.strip_prefix("page.").is_some_and(|digits| {
        digits.len() == 32
            && digits
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte))
    })
}

/// The prefix of a client secret.
const CLIENT_SECRET_PREFIX: &str = "mdcs_";

/// Bytes of a client secret: its prefix and 64 hex digits.
const CLIENT_SECRET_BYTES: usize = CLIENT_SECRET_PREFIX.len() + 64;

/// An order's client secret: what a page shows, with the publishable key, to pay that one order.
/// 256 random bits, so it cannot be guessed; `Debug` shows only its prefix, so it reaches no log.
#[derive(Clone, PartialEq, Eq)]
pub struct ClientSecret(String);

impl std::fmt::Debug for ClientSecret {
    fn fmt(&self, formatter: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(formatter, "ClientSecret({CLIENT_SECRET_PREFIX}…)")
    }
}

impl ClientSecret {
    /// A fresh secret: its prefix and 32 random bytes in hex.
    pub fn generate() -> Self {
        let mut bytes = [0_u8; 32];
        getrandom::fill(&mut bytes).expect("the OS random number generator is available");
        Self(format!("{CLIENT_SECRET_PREFIX}{}", hex::encode(bytes)))
    }

    /// A secret as a page sent it; `None` for anything that cannot be one (so that it is
    /// refused before any lookup).
    pub fn parse(text: &str) -> Option<Self> {
        let digits = text.strip_prefix(CLIENT_SECRET_PREFIX)?;
        (text.len() == CLIENT_SECRET_BYTES
            && digits
                .bytes()
                .all(|byte| byte.is_ascii_digit() || (b'a'..=b'f').contains(&byte)))
        .then(|| Self(text.to_owned()))
    }

    /// A secret read back from the database, as it was stored.
    pub fn stored(text: String) -> Self {
        Self(text)
    }

    /// The secret itself, for the answer to the merchant's server and the database.
    pub fn expose(&self) -> &str {
        &self.0
    }
}

/// Who sent a request, as far as idempotency and limits go: the merchant's server (a secret
/// key), or a page paying one order (the publishable key with that order's client secret).
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub enum Principal {
    /// The merchant's server.
    Server,
    /// A checkout page of this order.
    Page {
        /// The order the page's client secret is bound to.
        order_id: String,
    },
}

/// The tenant part of the toolkit's scope (idempotency records, one-time tokens) for what
/// `principal` sends: the tenant itself for its server, and for a page a name of its own per
/// order (`page.` and 32 hex digits of SHA-256 over the tenant and the order id), which fits
/// the scope's 64 bytes whatever the order id, and which no request of the server can name.
pub fn scope_tenant(tenant: &str, principal: &Principal) -> String {
    match principal {
        Principal::Server => tenant.to_owned(),
        Principal::Page { order_id } => {
            let mut digest = Sha256::new();
            digest.update(tenant.as_bytes());
            digest.update([0]);
            digest.update(order_id.as_bytes());
            format!("page.{}", hex::encode(&digest.finalize()[..16]))
        }
    }
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

    #[test]
    fn client_secrets_are_parsed_strictly_and_never_printed() {
        let secret = ClientSecret::generate();
        assert_eq!(ClientSecret::parse(secret.expose()), Some(secret.clone()));
        assert_ne!(ClientSecret::generate(), secret);
        assert!(!format!("{secret:?}").contains(&secret.expose()[5..]));
        let digits = &secret.expose()[5..];
        for refused in [
            String::new(),
            digits.to_owned(),
            format!("mdcs_{}", &digits[1..]),
            format!("mdcs_{digits}0"),
            format!("mdcs_{}", digits.to_uppercase()),
            format!("mdk_{digits}"),
            format!("mdcs_{}g", &digits[1..]),
        ] {
            assert_eq!(ClientSecret::parse(&refused), None, "{refused}");
        }
    }

    #[test]
    fn a_page_has_a_scope_of_its_own_per_order_and_tenant() {
        let server = scope_tenant("t1", &Principal::Server);
        let page = |tenant: &str, order: &str| {
            scope_tenant(
                tenant,
                &Principal::Page {
                    order_id: order.to_owned(),
                },
            )
        };
        assert_eq!(server, "t1");
        assert!(!is_page_scope(&server) && is_page_scope(&page("t1", "o-1")));
        assert_ne!(page("t1", "o-1"), page("t1", "o-2"));
        assert_ne!(page("t1", "o-1"), page("t2", "o-1"));
        // The separator keeps ("t1", "2o") apart from ("t12", "o").
        assert_ne!(page("t1", "2o"), page("t12", "o"));
        let long = page("t1", &"~".repeat(64));
        assert!(long.len() <= 64 && mideng::Scope::new(&long, "payment.create").is_ok());
    }
}
