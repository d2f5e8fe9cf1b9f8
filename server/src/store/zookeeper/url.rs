//! `zookeeper://[user:password@]host:port[,host:port...][/chroot]`: where
//! a ZooKeeper store is, and as whom to reach it; `zookeepers://` for TLS
//! (to every server: ZooKeeper's `secureClientPort`).

use crate::error::{Error, Result};

/// The chroot when the URL names none: every node the store writes lives
/// under it, so that one ensemble can serve other users beside it.
pub const DEFAULT_CHROOT: &str = "/leasehold";

/// A parsed `zookeeper://` URL. Its `Debug` leaves the password out.
#[derive(Clone, PartialEq, Eq)]
pub struct ZooKeeperUrl {
    /// The ensemble's members, `host:port` each, as written.
    pub hosts: Vec<String>,
    /// The store's root (`/leasehold` unless the URL names one).
    pub chroot: String,
    /// `user:password` for ZooKeeper's digest authentication, if given.
    pub digest: Option<(String, String)>,
    /// Whether the servers are reached over TLS (`zookeepers://`).
    pub tls: bool,
}

impl std::fmt::Debug for ZooKeeperUrl {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ZooKeeperUrl")
            .field("hosts", &self.hosts)
            .field("chroot", &self.chroot)
            .field("digest_user", &self.digest.as_ref().map(|(user, _)| user))
            .field("tls", &self.tls)
            .finish()
    }
}

impl ZooKeeperUrl {
    /// Reads `url`; a mistake is a configuration error that quotes the
    /// part at fault (never the password).
    pub fn parse(url: &str) -> Result<Self> {
        let bad = |why: String| Error::InvalidArgument(format!("--store {}: {why}", redacted(url)));
        let (tls, rest) = if let Some(rest) = url.strip_prefix("zookeeper://") {
            (false, rest)
        } else if let Some(rest) = url.strip_prefix("zookeepers://") {
            (true, rest)
        } else {
            return Err(bad("not a zookeeper:// or zookeepers:// URL".into()));
        };
        // The credentials end at the last `@` (a password may hold one).
        let (userinfo, rest) = match rest.rsplit_once('@') {
            Some((userinfo, rest)) => (Some(userinfo), rest),
            None => (None, rest),
        };
        let digest = match userinfo {
            None => None,
            Some(userinfo) => {
                let (user, password) = userinfo.split_once(':').ok_or_else(|| {
                    bad("credentials are user:password (ZooKeeper's digest scheme)".into())
                })?;
                if user.is_empty() {
                    return Err(bad("the user of user:password is empty".into()));
                }
                Some((percent_decode(user)?, percent_decode(password)?))
            }
        };
        let (hosts, chroot) = match rest.split_once('/') {
            Some((hosts, path)) => (hosts, format!("/{path}")),
            None => (rest, DEFAULT_CHROOT.to_owned()),
        };
        let hosts: Vec<String> = hosts
            .split(',')
            .map(str::trim)
            .filter(|h| !h.is_empty())
            .map(str::to_owned)
            .collect();
        if hosts.is_empty() {
            return Err(bad("no ZooKeeper server address".into()));
        }
        if let Some(h) = hosts.iter().find(|h| !host_port(h)) {
            return Err(bad(format!(
                "'{h}' is not host:port (a host name, an IPv4 address or an [IPv6] address, \
                 and a port)"
            )));
        }
        let chroot = chroot.trim_end_matches('/').to_owned();
        if chroot.is_empty() {
            return Err(bad(
                "the chroot is '/': the store needs a node of its own (the default is \
                 /leasehold)"
                    .into(),
            ));
        }
        if let Some(segment) = chroot
            .split('/')
            .skip(1)
            .find(|s| s.is_empty() || *s == "." || *s == ".." || s.contains(char::is_control))
        {
            return Err(bad(format!(
                "the chroot '{chroot}' has a segment ZooKeeper refuses ('{segment}')"
            )));
        }
        Ok(ZooKeeperUrl {
            hosts,
            chroot,
            digest,
            tls,
        })
    }

    /// The connect string of the ensemble, without the chroot.
    pub fn connect_string(&self) -> String {
        self.hosts.join(",")
    }
}

/// `url` with the password of its credentials replaced by `***`.
fn redacted(url: &str) -> String {
    match url.split_once("://") {
        Some((scheme, rest)) => match rest.rsplit_once('@') {
            Some((userinfo, hosts)) => match userinfo.split_once(':') {
                Some((user, _)) => format!("{scheme}://{user}:***@{hosts}"),
                // No `:`: what was written may be a password alone.
                None => format!("{scheme}://***@{hosts}"),
            },
            None => url.to_owned(),
        },
        None => url.to_owned(),
    }
}

/// Whether `h` is `host:port` with a plain host (name, IPv4, `[IPv6]`, as
/// the multi-host Redis URLs take them) and a port number.
fn host_port(h: &str) -> bool {
    h.rsplit_once(':')
        .and_then(|(_, port)| port.parse::<u16>().ok())
        .is_some_and(|port| port != 0)
        && crate::store::url::plain_host(h)
}

/// `%XX` escapes decoded (a password with `@`, `:` or `/` is written so).
fn percent_decode(text: &str) -> Result<String> {
    let bytes = text.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes
                .get(i + 1..i + 3)
                .and_then(|h| std::str::from_utf8(h).ok())
                .and_then(|h| u8::from_str_radix(h, 16).ok())
                .ok_or_else(|| {
                    Error::InvalidArgument(
                        "--store: a '%' in the credentials starts no %XX escape".into(),
                    )
                })?;
            out.push(hex);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| {
        Error::InvalidArgument("--store: the credentials are not UTF-8 once decoded".into())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn hosts_chroot_and_credentials() {
        let url = ZooKeeperUrl::parse("zookeeper://a:2181,b:2182,[::1]:2183/locks/prod").unwrap();
        assert_eq!(url.hosts, ["a:2181", "b:2182", "[::1]:2183"]);
        assert_eq!(url.chroot, "/locks/prod");
        assert_eq!(url.digest, None);
        assert!(!url.tls);
        assert_eq!(url.connect_string(), "a:2181,b:2182,[::1]:2183");
        let url = ZooKeeperUrl::parse("zookeepers://a:2281/locks").unwrap();
        assert!(url.tls);
        assert_eq!(
            (url.hosts, url.chroot),
            (vec!["a:2281".into()], "/locks".into())
        );

        let url = ZooKeeperUrl::parse("zookeeper://broker:p%40ss%3Aw@127.0.0.1:2181").unwrap();
        assert_eq!(url.chroot, DEFAULT_CHROOT);
        assert_eq!(url.digest, Some(("broker".into(), "p@ss:w".into())));
        assert!(!format!("{url:?}").contains("p@ss"), "{url:?}");
        // A raw `@` in the password: the credentials end at the last one.
        let url = ZooKeeperUrl::parse("zookeeper://u:a@b@h:1/").unwrap_err();
        assert!(url.to_string().contains("chroot is '/'"), "{url}");
        let url = ZooKeeperUrl::parse("zookeeper://u:a@b@h:1").unwrap();
        assert_eq!(url.digest, Some(("u".into(), "a@b".into())));
    }

    #[test]
    fn mistakes_are_named_without_the_password() {
        for (url, said) in [
            ("zookeeper://", "no ZooKeeper server address"),
            ("zookeeper://h", "'h' is not host:port"),
            ("zookeeper://h:0", "'h:0' is not host:port"),
            ("zookeeper://h#x:1", "'h#x:1' is not host:port"),
            ("zookeeper://h:1/a//b", "segment ZooKeeper refuses"),
            ("zookeeper://h:1/a/../b", "segment ZooKeeper refuses"),
            ("zookeeper://secret@h:1", "user:password"),
            (
                "zookeeper://:secret@h:1",
                "the user of user:password is empty",
            ),
            ("etcd://h:1", "not a zookeeper:// or zookeepers:// URL"),
            ("zookeeper://u:%zz@h:1", "%XX"),
        ] {
            let err = ZooKeeperUrl::parse(url).unwrap_err().to_string();
            assert!(err.contains(said), "{url}: {err}");
            assert!(
                !err.contains("secret") && !err.contains("%zz@"),
                "{url}: {err}"
            );
        }
    }
}
