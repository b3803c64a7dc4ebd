//! Server URLs pointed at another address: the instances reach a server through the storm's
//! forwarder, on its port, with the URL otherwise unchanged.

/// The `host:port` of a server URL (`scheme://user:password@host:port/database`).
pub(super) fn server_address(url: &str) -> Option<String> {
    let (_, rest) = url.split_once("://")?;
    let rest = rest.rsplit_once('@').map_or(rest, |(_, rest)| rest);
    let (address, _) = rest.split_once('/')?;
    address.contains(':').then(|| address.to_owned())
}

/// `url` with its `host:port` replaced by `address`.
pub(super) fn with_address(url: &str, address: &str) -> String {
    let Some(old) = server_address(url) else {
        return url.to_owned();
    };
    let (scheme, rest) = url.split_once("://").unwrap_or(("", url));
    match rest.rsplit_once('@') {
        Some((credentials, rest)) => format!(
            "{scheme}://{credentials}@{}",
            rest.replacen(&old, address, 1)
        ),
        None => format!("{scheme}://{}", rest.replacen(&old, address, 1)),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_server_url_is_pointed_at_another_address_and_keeps_the_rest() {
        let url = "postgres://mideng:p%40ss@127.0.0.1:5432/storm_1";
        assert_eq!(server_address(url).as_deref(), Some("127.0.0.1:5432"));
        assert_eq!(
            with_address(url, "127.0.0.1:40000"),
            "postgres://mideng:p%40ss@127.0.0.1:40000/storm_1"
        );
        assert_eq!(
            with_address("mysql://127.0.0.1:3306/storm_2", "127.0.0.1:40001"),
            "mysql://127.0.0.1:40001/storm_2"
        );
        assert_eq!(server_address("sqlite:///tmp/a.db"), None);
    }
}
