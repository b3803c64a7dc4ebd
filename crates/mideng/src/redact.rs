//! Secrets kept out of logs and error messages: a connection URL shown without its password.
//!
//! Store and broker URLs carry their credentials in the user info (`scheme://user:password@host`,
//! or a lone token, `nats://token@host`), and those URLs end up in connection errors, `Debug`
//! output and start-up logs. A URL that may hold a password is a [`SecretUrl`]: it shows itself
//! (`Display`, `Debug`) through [`url`], and its text is reached only by asking for it
//! ([`SecretUrl::expose`]), where a connection is made. One rule for what is hidden, tested once.

use std::fmt;

/// `url` with the password in its user info replaced by `***`, or the whole user info when it
/// is a lone token (`nats://s3cr3t@host`), since a lone value may be the secret itself. The
/// scheme, user name, host, port, path and query are kept, so the line still says where a
/// connection went. Only the authority is searched for the `@` that ends the user info, so an
/// `@` in a path or query is left alone; text without `://` or without user info is returned
/// as it is. A list of URLs separated by commas (a NATS cluster's servers) has each of its
/// URLs redacted.
pub fn url(url: &str) -> String {
    let mut shown = String::with_capacity(url.len());
    let mut rest = url;
    while let Some(next) = next_url_start(rest) {
        shown.push_str(&one(&rest[..next]));
        rest = &rest[next..];
    }
    shown.push_str(&one(rest));
    shown
}

/// Where the next URL of a comma-separated list starts in `text` (after its first character):
/// just past a comma that is followed by a scheme and `://`.
fn next_url_start(text: &str) -> Option<usize> {
    text.char_indices().skip(1).find_map(|(index, c)| {
        let after = index + 1;
        (c == ',' && starts_with_scheme(&text[after..])).then_some(after)
    })
}

/// Whether `text` opens with `scheme://` (a letter, then letters, digits, `+`, `-` or `.`).
fn starts_with_scheme(text: &str) -> bool {
    let Some(end) = text.find("://") else {
        return false;
    };
    let scheme = &text[..end];
    scheme.starts_with(|c: char| c.is_ascii_alphabetic())
        && scheme
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '+' | '-' | '.'))
}

/// [`url`] for a single URL.
fn one(url: &str) -> String {
    let Some(scheme_end) = url.find("://").map(|index| index + 3) else {
        return url.to_owned();
    };
    let rest = &url[scheme_end..];
    let authority_end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    // The last `@` of the authority: a password may itself contain an unescaped `@`.
    let Some(at) = rest[..authority_end].rfind('@') else {
        return url.to_owned();
    };
    let shown_user_info = match rest[..at].split_once(':') {
        Some((user, _password)) => format!("{user}:***"),
        None => "***".to_owned(),
    };
    format!("{}{shown_user_info}{}", &url[..scheme_end], &rest[at..])
}

/// A URL that may hold a password: a database's, Redis's, a broker's. It prints itself
/// redacted ([`url`]) in `Display` and `Debug`, so a settings struct that holds it can derive
/// `Debug` and be logged whole; the text itself is had only from [`SecretUrl::expose`].
///
/// It (de)serializes as the plain string, since configuration files and environment variables
/// hold it so.
///
/// ```
/// use mideng::redact::SecretUrl;
///
/// let url = SecretUrl::new("postgres://app:s3cret@db:5432/pay");
/// assert_eq!(url.to_string(), "postgres://app:***@db:5432/pay");
/// assert_eq!(format!("{url:?}"), "\"postgres://app:***@db:5432/pay\"");
/// assert_eq!(url.expose(), "postgres://app:s3cret@db:5432/pay");
/// assert_eq!(url.scheme(), "postgres");
/// ```
#[derive(Clone, PartialEq, Eq, Hash, serde::Deserialize, serde::Serialize)]
#[serde(transparent)]
pub struct SecretUrl(String);

impl SecretUrl {
    /// Wraps `url`.
    pub fn new(url: impl Into<String>) -> Self {
        Self(url.into())
    }

    /// The URL with its password, for the one place that connects with it.
    pub fn expose(&self) -> &str {
        &self.0
    }

    /// The URL's scheme (`postgres`, `redis`, …): the text before the first `:`.
    pub fn scheme(&self) -> &str {
        self.0.split(':').next().unwrap_or_default()
    }
}

impl fmt::Display for SecretUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str(&url(&self.0))
    }
}

impl fmt::Debug for SecretUrl {
    fn fmt(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&url(&self.0), formatter)
    }
}

impl From<String> for SecretUrl {
    fn from(url: String) -> Self {
        Self(url)
    }
}

impl From<&str> for SecretUrl {
    fn from(url: &str) -> Self {
        Self(url.to_owned())
    }
}

#[cfg(test)]
mod tests {
    use super::{SecretUrl, url};

    #[test]
    fn redaction_hides_the_password_only() {
        assert_eq!(
            url("amqp://guest:secret@127.0.0.1:5672/%2f"),
            "amqp://guest:***@127.0.0.1:5672/%2f"
        );
        assert_eq!(
            url("nats://app:secret@10.0.0.1:4222"),
            "nats://app:***@10.0.0.1:4222"
        );
        assert_eq!(
            url("postgres://app:s3cret@db:5432/pay"),
            "postgres://app:***@db:5432/pay"
        );
        assert!(!url("mysql://root:pw@localhost/db").contains("pw"));
        assert_eq!(url("redis://:pw@cache:6379/0"), "redis://:***@cache:6379/0");
        assert_eq!(
            url("amqps://app:p@ss@mq:5671/prod"),
            "amqps://app:***@mq:5671/prod"
        );
    }

    #[test]
    fn redaction_hides_a_lone_token() {
        assert_eq!(url("amqp://token@host/vh"), "amqp://***@host/vh");
        assert_eq!(url("nats://s3cr3t@host"), "nats://***@host");
    }

    #[test]
    fn redaction_leaves_urls_without_credentials_alone() {
        assert_eq!(url("amqp://host:5672/a@b"), "amqp://host:5672/a@b");
        assert_eq!(url("nats://127.0.0.1:4222"), "nats://127.0.0.1:4222");
        assert_eq!(url("sqlite://data/mideng.db"), "sqlite://data/mideng.db");
        assert_eq!(
            url("https://host/path?next=a@b"),
            "https://host/path?next=a@b"
        );
        assert_eq!(url("not a url"), "not a url");
        assert_eq!(url("memory"), "memory");
    }

    #[test]
    fn redaction_hides_every_password_of_a_list() {
        assert_eq!(
            url("nats://a:pw1@h1:4222,nats://b:pw2@h2:4222,nats://tok@h3:4222"),
            "nats://a:***@h1:4222,nats://b:***@h2:4222,nats://***@h3:4222"
        );
        // A host list inside one authority is one URL.
        assert_eq!(
            url("postgres://app:pw@h1:5432,h2:5432/pay"),
            "postgres://app:***@h1:5432,h2:5432/pay"
        );
        // A comma inside a password does not end the URL.
        assert_eq!(url("amqp://u:pa,ss@host/vh"), "amqp://u:***@host/vh");
    }

    #[test]
    fn a_secret_url_shows_itself_redacted_and_serializes_whole() {
        let secret = SecretUrl::from("redis://:pw@cache:6379/0");
        assert_eq!(secret.to_string(), "redis://:***@cache:6379/0");
        assert!(!format!("{secret:?}").contains("pw"));
        assert!(!format!("{:?}", Some(vec![secret.clone()])).contains("pw"));
        assert_eq!(secret.expose(), "redis://:pw@cache:6379/0");
        let json = serde_json::to_string(&secret).unwrap_or_default();
        assert_eq!(json, "\"redis://:pw@cache:6379/0\"");
        let back: Result<SecretUrl, _> = serde_json::from_str(&json);
        assert_eq!(back.ok(), Some(secret));
    }
}
