//! Merchant notifications (webhooks) after the Standard Webhooks specification: the events an
//! endpoint may subscribe to, its signing secret, the signature, the message body and the
//! retry schedule. Pure rules, no I/O.
//!
//! A message is signed as `v1,<base64 HMAC-SHA256(key, "{id}.{timestamp}.{body}")>`, where the
//! key is the bytes behind the endpoint's `whsec_<base64>` secret, and is sent with the headers
//! `webhook-id` (the same on every retry and every manual redelivery, so a receiver
//! deduplicates on it), `webhook-timestamp` (Unix seconds of this attempt) and
//! `webhook-signature`.

use std::time::Duration;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::{KeyInit, Mac};
use serde::{Deserialize, Serialize};

use super::events::{PAYMENT_CLOSED, PAYMENT_SUCCEEDED, REFUND_SUCCEEDED};
use super::outbound::TargetPolicy;

/// Event types an endpoint may subscribe to.
pub const EVENT_TYPES: [&str; 3] = [PAYMENT_SUCCEEDED, PAYMENT_CLOSED, REFUND_SUCCEEDED];

/// The prefix of a signing secret.
pub const SECRET_PREFIX: &str = "whsec_";

/// Bytes of a generated signing key (192 bits).
const SECRET_KEY_BYTES: usize = 24;

/// Longest endpoint URL, in bytes.
pub const URL_BYTES_MAX: usize = 2048;

/// Most endpoints per tenant.
pub const ENDPOINTS_PER_TENANT_MAX: usize = 20;

/// The retry schedule of the specification's recommendation: the first attempt at once, then
/// after 5 s, 5 min, 30 min, 2 h, 5 h, 10 h and 10 h — eight attempts over about 27.6 hours.
pub const SCHEDULE: [Duration; 8] = [
    Duration::ZERO,
    Duration::from_secs(5),
    Duration::from_secs(5 * 60),
    Duration::from_secs(30 * 60),
    Duration::from_secs(2 * 60 * 60),
    Duration::from_secs(5 * 60 * 60),
    Duration::from_secs(10 * 60 * 60),
    Duration::from_secs(10 * 60 * 60),
];

/// A fresh signing secret: `whsec_` and the base64 of 24 random bytes.
pub fn generate_secret() -> String {
    let mut key = [0_u8; SECRET_KEY_BYTES];
    getrandom::fill(&mut key).expect("the OS random number generator is available");
    format!("{SECRET_PREFIX}{}", STANDARD.encode(key))
}

/// The key bytes behind a `whsec_` secret; `None` for anything else.
pub fn secret_key(secret: &str) -> Option<Vec<u8>> {
    let encoded = secret.strip_prefix(SECRET_PREFIX)?;
    let key = STANDARD.decode(encoded).ok()?;
    (!key.is_empty()).then_some(key)
}

/// The `webhook-signature` value of one message: `v1,` and the base64 HMAC-SHA256 of
/// `{id}.{timestamp}.{body}` under `key`.
pub fn signature(key: &[u8], id: &str, timestamp_secs: i64, body: &[u8]) -> String {
    let mut mac =
        hmac::Hmac::<sha2::Sha256>::new_from_slice(key).expect("HMAC takes a key of any length");
    mac.update(id.as_bytes());
    mac.update(b".");
    mac.update(timestamp_secs.to_string().as_bytes());
    mac.update(b".");
    mac.update(body);
    format!("v1,{}", STANDARD.encode(mac.finalize().into_bytes()))
}

/// How long the previous secret keeps signing after a rotation, unless the rotation says
/// otherwise: a day, so that every receiver has time to take the new one.
pub const PREVIOUS_SECRET_VALID_DEFAULT: Duration = Duration::from_secs(24 * 60 * 60);

/// The longest overlap a rotation may ask for: a week.
pub const PREVIOUS_SECRET_VALID_MAX: Duration = Duration::from_secs(7 * 24 * 60 * 60);

/// The secrets that sign a message at `now_ms`: the endpoint's current one, and its previous
/// one while the overlap of the last rotation lasts (until `previous_until_ms`, exclusive).
pub fn signing_secrets<'a>(
    current: &'a str,
    previous: Option<(&'a str, i64)>,
    now_ms: i64,
) -> Vec<&'a str> {
    let mut secrets = vec![current];
    if let Some((previous, until_ms)) = previous
        && now_ms < until_ms
    {
        secrets.push(previous);
    }
    secrets
}

/// The `webhook-signature` value of one message signed under each of `keys`, space-separated,
/// the first key's first: the specification lets a header carry several `v1,` signatures, and a
/// receiver accepts the message when any one of them is its own. During a rotation's overlap a
/// receiver holding either secret verifies the message.
pub fn signatures(keys: &[Vec<u8>], id: &str, timestamp_secs: i64, body: &[u8]) -> String {
    keys.iter()
        .map(|key| signature(key, id, timestamp_secs, body))
        .collect::<Vec<_>>()
        .join(" ")
}

/// The body of a message: the event's type, its time and its data.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Message {
    /// `payment.succeeded`, `payment.closed` or `refund.succeeded`.
    #[serde(rename = "type")]
    pub event_type: String,
    /// When the event happened (RFC 3339).
    pub timestamp: String,
    /// The event itself.
    pub data: serde_json::Value,
}

/// When the next attempt is due after `attempts` failed ones, counted from the last: `None`
/// when the schedule is exhausted. `schedule[0]` is the delay of the first attempt.
pub fn next_delay(schedule: &[Duration], attempts: usize) -> Option<Duration> {
    schedule.get(attempts).copied()
}

/// Why an endpoint was refused.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum EndpointError {
    /// Not an absolute http(s) URL of at most [`URL_BYTES_MAX`] bytes, with a host and
    /// without credentials or a fragment.
    #[error(
        "url must be an absolute http or https URL of at most 2048 bytes, without user info or fragment"
    )]
    Url,
    /// The URL's host is an address that is not globally routable unicast (loopback, private,
    /// link-local, any special-purpose range, or an IPv6 form carrying such an IPv4), or a
    /// special-use name (`localhost`, `*.local`, `*.internal`…): see
    /// [`crate::domain::outbound`].
    #[error(
        "url names a private, local or special-purpose address or name; this service delivers to public hosts only"
    )]
    PrivateTarget,
    /// An event type that does not exist, or none at all.
    #[error("events must name one or more of payment.succeeded, payment.closed, refund.succeeded")]
    Events,
}

/// Checks an endpoint's URL: unless `targets` allows private targets, its host must be a
/// globally routable address (or one of the operator's allowed IP and port pairs) or a name
/// that is not special-use ([`crate::domain::outbound`]).
///
/// An IP literal is judged as the URL standard reads it (`0`, `127.1`, `0x7f.1` and
/// `[::ffff:0.0.0.0]` are the addresses they are). A name is not resolved here: its answers
/// may change after registration (DNS rebinding), and registration stays free of I/O (no DNS
/// in tests). The dispatcher's resolver, which judges every address a name resolves to at
/// each connection, is the authority; this check refuses early what is plainly local.
pub fn checked_url(text: &str, targets: &TargetPolicy) -> Result<reqwest::Url, EndpointError> {
    if text.len() > URL_BYTES_MAX {
        return Err(EndpointError::Url);
    }
    let url = reqwest::Url::parse(text).map_err(|_| EndpointError::Url)?;
    if !matches!(url.scheme(), "http" | "https")
        || !url.username().is_empty()
        || url.password().is_some()
        || url.fragment().is_some()
    {
        return Err(EndpointError::Url);
    }
    if url.host().is_none() {
        return Err(EndpointError::Url);
    }
    if !targets.permits_url(&url) {
        return Err(EndpointError::PrivateTarget);
    }
    Ok(url)
}

/// Checks the subscribed event types: one or more known ones, each once, in a stable order.
pub fn checked_events(events: &[String]) -> Result<Vec<String>, EndpointError> {
    if events.is_empty()
        || events
            .iter()
            .any(|event| !EVENT_TYPES.contains(&event.as_str()))
    {
        return Err(EndpointError::Events);
    }
    Ok(EVENT_TYPES
        .iter()
        .filter(|known| events.iter().any(|event| event == *known))
        .map(|known| (*known).to_owned())
        .collect())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn anywhere() -> TargetPolicy {
        TargetPolicy {
            allow_private: true,
            allowed: Vec::new(),
        }
    }

    #[test]
    fn a_signature_follows_the_specification() {
        // The specification's own example: secret, id, timestamp, body and signature.
        let key = secret_key("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw").expect("a secret");
        let body = br#"{"test": 2432232314}"#;
        assert_eq!(
            signature(&key, "msg_p5jXN8AQM9LWM0D4loKWxJek", 1_614_265_330, body),
            "v1,g0hM9SsE+OTPJTGt/tmIKtSyZlE3uFJELVlNIOLJ1OE="
        );
        let secret = generate_secret();
        assert!(secret.starts_with(SECRET_PREFIX));
        assert_eq!(
            secret_key(&secret).map(|key| key.len()),
            Some(SECRET_KEY_BYTES)
        );
        assert_eq!(secret_key("sk_abc"), None);
        assert_eq!(secret_key("whsec_!!"), None);
    }

    #[test]
    fn during_a_rotations_overlap_both_secrets_sign_and_then_only_the_new_one() {
        let (old, new) = (generate_secret(), generate_secret());
        assert_eq!(
            signing_secrets(&new, Some((&old, 1_000)), 999),
            [&new, &old]
        );
        assert_eq!(signing_secrets(&new, Some((&old, 1_000)), 1_000), [&new]);
        assert_eq!(signing_secrets(&new, None, 0), [&new]);
        let keys: Vec<_> = signing_secrets(&new, Some((&old, 1_000)), 0)
            .into_iter()
            .map(|secret| secret_key(secret).expect("a secret"))
            .collect();
        // A timestamp of now: the reference library checks it against its own clock.
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .expect("after 1970")
            .as_secs();
        let now = i64::try_from(now).expect("in range");
        let header = signatures(&keys, "msg_1", now, b"{}");
        let parts: Vec<_> = header.split(' ').collect();
        assert_eq!(parts.len(), 2, "{header}");
        assert_eq!(parts[0], signature(&keys[0], "msg_1", now, b"{}"));
        assert_eq!(parts[1], signature(&keys[1], "msg_1", now, b"{}"));
        // Either secret alone verifies the message, as the reference library reads the header;
        // a third does not.
        let verifies = |secret: &str| {
            let mut headers = axum::http::HeaderMap::new();
            headers.insert("webhook-id", "msg_1".parse().expect("value"));
            headers.insert("webhook-timestamp", now.to_string().parse().expect("value"));
            headers.insert("webhook-signature", header.parse().expect("value"));
            standardwebhooks::Webhook::new(secret)
                .expect("a secret")
                .verify(b"{}", &headers)
                .is_ok()
        };
        assert!(verifies(&old));
        assert!(verifies(&new));
        assert!(!verifies(&generate_secret()));
    }

    #[test]
    fn the_schedule_spans_more_than_a_day() {
        let total: Duration = SCHEDULE.iter().sum();
        assert!(total > Duration::from_secs(24 * 60 * 60), "{total:?}");
        assert_eq!(next_delay(&SCHEDULE, 0), Some(Duration::ZERO));
        assert_eq!(next_delay(&SCHEDULE, 8), None);
    }

    #[test]
    fn endpoints_are_public_http_urls_with_known_events() {
        assert!(checked_url("https://merchant.example/hooks", &TargetPolicy::default()).is_ok());
        assert!(checked_url("https://8.8.8.8/hooks", &TargetPolicy::default()).is_ok());
        assert!(
            checked_url(
                "https://[2001:4860:4860::8888]/hooks",
                &TargetPolicy::default()
            )
            .is_ok()
        );
        // A name is not resolved at registration: the dispatcher judges its answers.
        assert!(
            checked_url(
                "https://localhost.merchant.example/hooks",
                &TargetPolicy::default()
            )
            .is_ok()
        );
        for local in [
            "http://127.0.0.1:8080/h",
            "http://localhost/h",
            "http://10.1.2.3/h",
            "http://169.254.169.254/latest",
            "http://[::1]/h",
            "http://0.0.0.0/h",
            // Found by an attacker: each passed a check of the literal text.
            "http://[::ffff:0.0.0.0]:8090/sim/trades/P1/pay",
            "http://[::ffff:127.0.0.1]/h",
            "http://[::ffff:169.254.169.254]/latest",
            "http://100.64.0.1/h",
            "http://198.18.0.1/h",
            "http://192.0.0.1/h",
            "http://240.0.0.1/h",
            "http://224.0.0.1/h",
            "http://0.1.2.3/h",
            "http://[::127.0.0.1]/h",
            "http://[64:ff9b::7f00:1]/h",
            "http://[2002:7f00:1::]/h",
            "http://localhost./h",
            // The same addresses in the URL standard's other spellings.
            "http://0/h",
            "http://127.1/h",
            "http://0x7f.1/h",
            "http://2130706433/h",
            "http://[fc00::1]/h",
            "http://[fe80::1]/h",
            // Special-use names.
            "http://a.localhost/h",
            "http://A.LocalHost./h",
            "http://printer.local/h",
            "http://metadata.google.internal/h",
            "http://router.home.arpa/h",
            "http://merchant.invalid/h",
            "http://merchant.test/h",
        ] {
            assert_eq!(
                checked_url(local, &TargetPolicy::default()),
                Err(EndpointError::PrivateTarget),
                "{local}"
            );
            assert!(checked_url(local, &anywhere()).is_ok(), "{local}");
        }
        for bad in [
            "ftp://merchant.example/",
            "https://user:pw@merchant.example/",
            "https://merchant.example/#f",
            "/relative",
            "",
        ] {
            assert_eq!(
                checked_url(bad, &anywhere()),
                Err(EndpointError::Url),
                "{bad}"
            );
        }
        assert_eq!(
            checked_events(&[
                "refund.succeeded".to_owned(),
                "payment.succeeded".to_owned()
            ]),
            Ok(vec![
                "payment.succeeded".to_owned(),
                "refund.succeeded".to_owned()
            ])
        );
        assert_eq!(checked_events(&[]), Err(EndpointError::Events));
        assert_eq!(
            checked_events(&["payment.created".to_owned()]),
            Err(EndpointError::Events)
        );
    }
}
