//! The part of the multi-host store URLs (`redis+sentinel://`,
//! `redis+cluster://`) that they share: scheme, credentials, and a
//! comma-separated list of `host:port`.

/// A `redis+KIND://` or `rediss+KIND://` URL cut into its parts.
pub(super) struct MultiHost<'a> {
    /// `redis` or `rediss`.
    pub scheme: &'static str,
    /// `user:password@` as written, percent-encoded or not (the
    /// delimiters `/ ? # @` in it are encoded here), or empty.
    pub userinfo: String,
    /// The `host:port` entries, each with a port (checked).
    pub hosts: Vec<&'a str>,
    /// What follows the first `/` after the hosts, if anything.
    pub path: Option<&'a str>,
}

impl<'a> MultiHost<'a> {
    /// Cuts `url` if its scheme is `redis+KIND` or `rediss+KIND`: `None`
    /// for another scheme, an error naming the entry (`what`) without a
    /// port.
    pub fn parse(url: &'a str, kind: &str, what: &str) -> Option<Result<Self, String>> {
        let (scheme, rest) = if let Some(rest) = url.strip_prefix(&format!("redis+{kind}://")) {
            ("redis", rest)
        } else if let Some(rest) = url.strip_prefix(&format!("rediss+{kind}://")) {
            ("rediss", rest)
        } else {
            return None;
        };
        // The credentials end at the last `@`, even one past a `/`: a
        // password written as it is (base64 has `/`), not percent-encoded,
        // used to be cut at its `/` into a "host" that the error below then
        // quoted, password and all. Its delimiters are encoded here, so
        // that it reaches Redis as written.
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (encode_delimiters(userinfo) + "@", rest),
            None => (String::new(), rest),
        };
        let (hosts, path) = match rest.split_once('/') {
            Some((hosts, path)) => (hosts, Some(path)),
            None => (rest, None),
        };
        let hosts: Vec<&str> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .collect();
        if hosts.is_empty() {
            return Some(Err(format!("no {what} address")));
        }
        if let Some(h) = hosts.iter().find(|h| {
            h.rsplit_once(':')
                .and_then(|(_, p)| p.parse::<u16>().ok())
                .is_none()
        }) {
            return Some(Err(format!("{what} '{h}' has no port")));
        }
        // Anything else in a host would be read by the URL parser as
        // something else: `h#x:7001` or `h?:7001` used to connect to h's
        // port 6379, the `:7001` taken for a fragment or a query.
        if let Some(h) = hosts.iter().find(|h| !plain_host(h)) {
            return Some(Err(format!(
                "{what} '{h}' is not host:port with a host name, an IPv4 address or an [IPv6] \
                 address"
            )));
        }
        Some(Ok(MultiHost {
            scheme,
            userinfo,
            hosts,
            path,
        }))
    }
}

/// `userinfo` with the characters that would end it in a URL (`/ ? # @`)
/// and the ASCII control characters percent-encoded; anything else, an
/// encoding already made included, as written. The control characters
/// because a URL parser drops a tab, CR or LF wherever it stands (WHATWG
/// URL): a password of CRs reached Redis empty, so no AUTH was sent at all.
fn encode_delimiters(userinfo: &str) -> String {
    let mut encoded = String::with_capacity(userinfo.len());
    for c in userinfo.chars() {
        match c {
            c if matches!(c, '/' | '?' | '#' | '@') || c.is_ascii_control() => {
                encoded.push_str(&format!("%{:02X}", c as u32));
            }
            c => encoded.push(c),
        }
    }
    encoded
}

/// Whether the host of `host:port` (its port checked already) is a name or
/// address written with nothing a URL parser reads as a delimiter: letters,
/// digits, `.`, `-`, `_`, or an IPv6 address in brackets.
pub(super) fn plain_host(host_port: &str) -> bool {
    let Some((host, _)) = host_port.rsplit_once(':') else {
        return false;
    };
    if let Some(v6) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        return v6.parse::<std::net::Ipv6Addr>().is_ok();
    }
    !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'.' | b'-' | b'_'))
}

#[cfg(test)]
mod tests {
    use redis::IntoConnectionInfo;

    use super::*;

    fn parse(url: &str) -> Result<MultiHost<'_>, String> {
        MultiHost::parse(url, "cluster", "node").expect("a cluster URL")
    }

    /// Found by the store_url fuzz target: a password with a `/` (as
    /// base64 has) was cut at it, and the error quoted its first part as a
    /// host. It now reaches Redis whole.
    #[test]
    fn a_password_with_delimiters_is_kept_whole_and_never_quoted() {
        let parsed = parse("redis+cluster://default:s3cr/t?#x@y@h:7000/0").unwrap();
        assert_eq!(parsed.hosts, ["h:7000"]);
        assert_eq!(parsed.path, Some("0"));
        let info = format!("redis://{}h:7000", parsed.userinfo)
            .into_connection_info()
            .unwrap();
        assert_eq!(info.redis_settings().password(), Some("s3cr/t?#x@y"));
        assert_eq!(info.redis_settings().username(), Some("default"));
        let e = parse("redis+cluster://default:s3cr/t@h").err().unwrap();
        assert!(e.contains("'h' has no port") && !e.contains("s3cr"), "{e}");
        // An encoding already made is left as it is.
        let parsed = parse("redis+cluster://:a%2Fb@h:1").unwrap();
        assert_eq!(parsed.userinfo, ":a%2Fb@");
    }

    /// Found by the store_url fuzz target (CI, 2026-12-05): a password of
    /// CRs was dropped by the URL parser (it removes tabs, CRs and LFs
    /// anywhere), so the node was reached with no password at all.
    #[test]
    fn control_characters_in_a_password_reach_redis_as_written() {
        for password in ["\r\r\r\r", "a\tb", "x\ny", "\u{1}z\u{7f}"] {
            let url = format!("redis+cluster://u:{password}@h:7000");
            let parsed = parse(&url).unwrap();
            let info = format!("redis://{}h:7000", parsed.userinfo)
                .into_connection_info()
                .unwrap();
            assert_eq!(
                info.redis_settings().password(),
                Some(password),
                "{password:?}"
            );
        }
    }

    /// Found by the store_url fuzz target: `h#x:7001` connected to h's
    /// port 6379 (the URL parser read `#x:7001` as a fragment).
    #[test]
    fn a_host_is_a_name_or_an_address_and_nothing_else() {
        for bad in [
            "h#x:7001",
            "h?:7001",
            "h\\x:7001",
            "h%41:7001",
            "[zz]:7001",
            ":7001",
        ] {
            let e = parse(&format!("redis+cluster://{bad}")).err().unwrap();
            assert!(e.contains("is not host:port"), "{bad}: {e}");
        }
        let parsed = parse("redis+cluster://node-a.example:7000, 10.0.0.1:7001,[::1]:7002,n_1:1");
        assert_eq!(
            parsed.unwrap().hosts,
            [
                "node-a.example:7000",
                "10.0.0.1:7001",
                "[::1]:7002",
                "n_1:1"
            ]
        );
    }
}
