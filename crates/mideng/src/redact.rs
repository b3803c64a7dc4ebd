//! Secrets kept out of logs and error messages: a connection URL shown without its password.
//!
//! Store and broker URLs carry their credentials in the user info (`scheme://user:password@host`,
//! or a lone token, `nats://token@host`), and those URLs end up in connection errors, `Debug`
//! output and start-up logs. Every place that shows one goes through [`url`], so that there is
//! one rule for what is hidden, tested once.

/// `url` with the password in its user info replaced by `***`, or the whole user info when it
/// is a lone token (`nats://s3cr3t@host`), since a lone value may be the secret itself. The
/// scheme, user name, host, port, path and query are kept, so the line still says where a
/// connection went. Only the authority is searched for the `@` that ends the user info, so an
/// `@` in a path or query is left alone; text without `://` or without user info is returned
/// as it is.
pub fn url(url: &str) -> String {
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

#[cfg(test)]
mod tests {
    use super::url;

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
}
