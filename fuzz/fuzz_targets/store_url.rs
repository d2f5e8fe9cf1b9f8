//! The store URL (`--store`), as `RedisStore::open` and `EtcdStore::open`
//! (and `ZooKeeperUrl::parse`, for the store being built) read it before
//! connecting: `redis+sentinel://` and `redis+cluster://` by
//! `server/src/store/url.rs` and its two callers, `etcd://` and `etcds://`
//! by `server/src/store/etcd/client.rs`, anything else by redis-rs.
//!
//! Asserts that a URL that parses connects where it says: every
//! `host:port` entry of a multi-host URL becomes one node with that port
//! (and that host, for a plain host name or IPv4 address), TLS exactly for
//! `rediss+`, the master name and database of a Sentinel URL as written,
//! the credentials on the data nodes and never on the sentinels; every member
//! of an etcd URL as written, TLS exactly for `etcds`, its user as written;
//! that a refusal is INVALID_ARGUMENT; and that neither a refusal nor a
//! target's `Debug` shows the password.

#![no_main]

use leasehold_server::{
    fuzzing::{self, StoreUrl},
    Error,
};
use libfuzzer_sys::fuzz_target;
use redis::{ConnectionAddr, ConnectionInfo};

/// The documented form, read independently:
/// `redis[s]+KIND://[user:password@]host:port[,host:port...][/path]`, the
/// credentials ending at the last `@`.
struct Written<'a> {
    tls: bool,
    userinfo: Option<&'a str>,
    hosts: Vec<&'a str>,
    path: Option<&'a str>,
}

fn written<'a>(url: &'a str, kind: &str) -> Option<Written<'a>> {
    let (tls, rest) = if let Some(r) = url.strip_prefix(&format!("redis+{kind}://")) {
        (false, r)
    } else {
        (true, url.strip_prefix(&format!("rediss+{kind}://"))?)
    };
    // The credentials end at the last `@` (a password may hold a `/`).
    let (userinfo, rest) = match rest.rsplit_once('@') {
        Some((u, r)) => (Some(u), r),
        None => (None, rest),
    };
    let (hosts, path) = match rest.split_once('/') {
        Some((h, p)) => (h, Some(p)),
        None => (rest, None),
    };
    let hosts = hosts
        .split(',')
        .map(str::trim)
        .filter(|h| !h.is_empty())
        .collect();
    Some(Written {
        tls,
        userinfo,
        hosts,
        path,
    })
}

/// Where `info` connects, and whether with TLS.
fn addr(info: &ConnectionInfo) -> (String, u16, bool) {
    match info.addr() {
        ConnectionAddr::Tcp(host, port) => (host.clone(), *port, false),
        ConnectionAddr::TcpTls { host, port, .. } => (host.clone(), *port, true),
        other => panic!("a multi-host URL gave {other:?}"),
    }
}

/// `info` connects to `entry` (a `host:port` as written) as documented.
fn connects_to(entry: &str, info: &ConnectionInfo, tls: bool) {
    let (host, port) = entry.rsplit_once(':').expect("an entry has a port");
    let (got_host, got_port, got_tls) = addr(info);
    assert_eq!(
        got_port,
        port.parse::<u16>().expect("a port"),
        "{entry:?}: {info:?}"
    );
    assert_eq!(got_tls, tls, "{entry:?}");
    // A plain host name or IPv4 address is used as written (the URL parser
    // lowercases names, and reads other forms its own way).
    let plain = !host.is_empty()
        && host
            .bytes()
            .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'.' || b == b'-')
        && !host.starts_with(['.', '-'])
        && !host.bytes().all(|b| b.is_ascii_digit() || b == b'.');
    if plain || host.parse::<std::net::Ipv4Addr>().is_ok() {
        assert_eq!(got_host, host, "{entry:?}");
    }
}

/// The password of a URL as a person wrote it: between the first `:` after
/// `://` and the last `@`.
fn password(url: &str) -> Option<&str> {
    let (_, rest) = url.split_once("://")?;
    let (userinfo, _) = rest.rsplit_once('@')?;
    let (_, password) = userinfo.split_once(':')?;
    Some(password)
}

/// `text` (from `url`) shows no 6 characters of `password` that the URL
/// holds only there, unless `masked` (the same from the URL with the
/// password's characters replaced) shows them too: they are then the
/// message's own words, not the password.
fn hides(url: &str, password: &str, text: &str, masked: &str) {
    let chars: Vec<char> = password.chars().collect();
    for window in chars.windows(6) {
        let w: String = window.iter().collect();
        if url.matches(&w).count() == 1 && !masked.contains(&w) {
            assert!(!text.contains(&w), "{w:?} of the password shown: {text:?}");
        }
    }
}

/// What `store_url` says of `url` with the password's letters replaced by
/// `x` (its delimiters, hex digits and so percent-encodings left in place,
/// so that it takes the same path): an error's message, or a target's
/// `Debug`.
fn masked(url: &str, password: &str) -> String {
    let start = url.find("://").map_or(0, |i| i + 3);
    let at = url.rfind('@').unwrap_or(url.len());
    let Some(colon) = url[start..at].find(':') else {
        return String::new();
    };
    let from = start + colon + 1;
    debug_assert_eq!(&url[from..at], password);
    let blank: String = password
        .chars()
        .map(|c| {
            if c.is_alphanumeric() && !c.is_ascii_hexdigit() {
                'x'
            } else {
                c
            }
        })
        .collect();
    match fuzzing::store_url(&format!("{}{blank}{}", &url[..from], &url[at..])) {
        Err(e) => e.to_string(),
        Ok(
            StoreUrl::Cluster { debug, .. }
            | StoreUrl::Sentinel { debug, .. }
            | StoreUrl::Etcd { debug, .. }
            | StoreUrl::ZooKeeper { debug, .. },
        ) => debug,
        Ok(StoreUrl::Single(_)) => String::new(),
    }
}

fuzz_target!(|data: &[u8]| {
    let Ok(url) = std::str::from_utf8(data) else {
        return;
    };
    let secret = password(url);
    let parsed = match fuzzing::store_url(url) {
        Ok(parsed) => parsed,
        Err(Error::InvalidArgument(m)) => {
            if let Some(p) = secret {
                hides(url, p, &m, &masked(url, p));
            }
            return;
        }
        Err(other) => panic!("{url:?}: not INVALID_ARGUMENT: {other:?}"),
    };
    match parsed {
        StoreUrl::Single(_) => {}
        StoreUrl::ZooKeeper {
            debug,
            hosts,
            chroot,
            user,
            tls,
        } => {
            let (want_tls, rest) = match url.strip_prefix("zookeeper://") {
                Some(rest) => (false, rest),
                None => (
                    true,
                    url.strip_prefix("zookeepers://")
                        .expect("a zookeeper:// or zookeepers:// URL"),
                ),
            };
            assert_eq!(tls, want_tls, "{url:?}");
            let (userinfo, rest) = match rest.rsplit_once('@') {
                Some((u, r)) => (Some(u), r),
                None => (None, rest),
            };
            let (written, path) = rest.split_once('/').unwrap_or((rest, "leasehold"));
            let written: Vec<&str> = written
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .collect();
            assert_eq!(hosts, written, "{url:?}");
            for host in &hosts {
                let (name, port) = host.rsplit_once(':').expect("a member has a port");
                assert!(
                    !name.is_empty() && port.parse::<u16>().is_ok_and(|p| p > 0),
                    "{url:?}"
                );
            }
            assert_eq!(
                chroot,
                format!("/{}", path.trim_end_matches('/')),
                "{url:?}"
            );
            assert!(
                !chroot
                    .split('/')
                    .skip(1)
                    .any(|s| s.is_empty() || s == "." || s == ".."),
                "{url:?}"
            );
            assert_eq!(user.is_some(), userinfo.is_some(), "{url:?}");
            if let Some(p) = secret {
                hides(url, p, &debug, &masked(url, p));
            }
        }
        StoreUrl::Etcd {
            debug,
            tls,
            user,
            endpoints,
        } => {
            let (want_tls, rest) = match url.strip_prefix("etcd://") {
                Some(rest) => (false, rest),
                None => (true, url.strip_prefix("etcds://").expect("an etcd URL")),
            };
            assert_eq!(tls, want_tls, "{url:?}");
            let (userinfo, hosts) = match rest.rsplit_once('@') {
                Some((u, h)) => (Some(u), h),
                None => (None, rest),
            };
            assert_eq!(
                user.as_ref().map(|(u, _)| u.as_str()),
                userinfo.and_then(|u| u.split_once(':')).map(|(u, _)| u),
                "{url:?}"
            );
            let hosts: Vec<&str> = hosts
                .strip_suffix('/')
                .unwrap_or(hosts)
                .split(',')
                .map(str::trim)
                .filter(|h| !h.is_empty())
                .collect();
            assert_eq!(endpoints, hosts, "{url:?}");
            for endpoint in &endpoints {
                let (host, port) = endpoint.rsplit_once(':').expect("a member has a port");
                assert!(!host.is_empty() && port.parse::<u16>().is_ok(), "{url:?}");
            }
            if let Some(p) = secret {
                hides(url, p, &debug, &masked(url, p));
            }
        }
        StoreUrl::Cluster { debug, seeds } => {
            let w = written(url, "cluster").expect("a cluster URL");
            assert_eq!(seeds.len(), w.hosts.len(), "{url:?}");
            for (entry, seed) in w.hosts.iter().zip(&seeds) {
                connects_to(entry, seed, w.tls);
                assert_eq!(
                    seed.redis_settings().password().is_some(),
                    w.userinfo
                        .is_some_and(|u| u.split_once(':').is_some_and(|(_, p)| !p.is_empty())),
                    "{url:?}"
                );
            }
            assert!(matches!(w.path, None | Some("" | "0")), "{url:?}");
            if let Some(p) = secret {
                hides(url, p, &debug, &masked(url, p));
            }
        }
        StoreUrl::Sentinel {
            debug,
            sentinels,
            master,
            node,
        } => {
            let w = written(url, "sentinel").expect("a sentinel URL");
            assert_eq!(sentinels.len(), w.hosts.len(), "{url:?}");
            for ((entry, info), host) in sentinels.iter().zip(&w.hosts) {
                assert_eq!(entry, host);
                connects_to(entry, info, w.tls);
                assert!(info.redis_settings().password().is_none(), "{url:?}");
                assert!(info.redis_settings().username().is_none(), "{url:?}");
            }
            let mut path = w.path.expect("a master name").split('/');
            assert_eq!(Some(master.as_str()), path.next(), "{url:?}");
            assert!(!master.is_empty());
            let db = path
                .next()
                .filter(|d| !d.is_empty())
                .map_or(0, |d| d.parse().expect("a db"));
            assert_eq!(node.redis_settings().db(), db, "{url:?}");
            assert_eq!(addr(&node).2, w.tls);
            if let Some(p) = secret {
                hides(url, p, &debug, &masked(url, p));
            }
        }
    }
});
