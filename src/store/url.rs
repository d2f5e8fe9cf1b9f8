//! The part of the multi-host store URLs (`redis+sentinel://`,
//! `redis+cluster://`) that they share: scheme, credentials, and a
//! comma-separated list of `host:port`.

/// A `redis+KIND://` or `rediss+KIND://` URL cut into its parts.
pub(super) struct MultiHost<'a> {
    /// `redis` or `rediss`.
    pub scheme: &'static str,
    /// `user:password@` as written (percent-encoded), or empty.
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
        let (authority, path) = match rest.split_once('/') {
            Some((authority, path)) => (authority, Some(path)),
            None => (rest, None),
        };
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (format!("{userinfo}@"), hosts),
            None => (String::new(), authority),
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
        Some(Ok(MultiHost {
            scheme,
            userinfo,
            hosts,
            path,
        }))
    }
}
