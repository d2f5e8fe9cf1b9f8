//! Listing on Redis ([`Backend::list`]): a walk over the keys of the names
//! under a prefix with `SCAN`, never `KEYS`, so that each call costs Redis
//! about `budget` keys whatever it holds.
//!
//! Every key of a name begins with the name's hash tag, `{prefix}{name}`
//! (`keys.rs`: the lease record, `:line`, `:until`, `:permits`, the per
//! token `:end:` records), so one `SCAN` with `MATCH` on the key prefix and
//! the name prefix (glob-escaped) finds every name that has anything stored
//! under it. A page gathers the distinct names of what one `SCAN` returns,
//! describes each (describe.lua, as [`Backend::describe`] does) and keeps
//! those with something on them, in name order.
//!
//! One call is one `SCAN` round trip (with `COUNT` `budget`), plus, on a
//! Cluster, one `CLUSTER SLOTS`, plus the describes of at most `budget`
//! names (on one server: pipelines of [`DESCRIBE_BATCH`] runs; on a
//! Cluster: the names of each slot one after another, the slots at once).
//! A narrow prefix over a large keyspace therefore walks in many pages,
//! most of them empty: a page is bounded by the keys it looks at, not by
//! the names it finds.
//!
//! The page token is the walk's position, opaque to callers:
//! `<cursor>[.<end>.<hash>][@<host>:<port>]`. `<cursor>` is where the next
//! `SCAN` starts. `SCAN` may answer more keys than its `COUNT` (a whole
//! hash bucket at once), hence more names than the page may describe: the
//! page then takes the names of the batch in the order of a fixed hash of
//! each (FNV-1a), up to the budget, and the token says to scan from the
//! same cursor again (`<end>`: the cursor that `SCAN` answered, `<hash>`:
//! the last hash listed, 16 hex digits) and skip what was listed. If the
//! second `SCAN` answers another cursor, the batch changed in between (keys
//! came or went in its buckets, or Redis resized its table), and it is
//! listed whole, a few names over the budget: a name may then be on two
//! pages, which the contract allows, none is missed, and the walk moves on
//! however busy the store. On a Cluster the walk goes over every primary
//! in turn, in the order of their addresses, and the token names the
//! primary (`@host:port`) its cursor belongs to.

use std::collections::{BTreeSet, HashMap};

use redis::{
    cluster_routing::{RoutingInfo, SingleNodeRoutingInfo},
    Value,
};

use super::{
    connect::Conn,
    keys::HashSlot,
    replies::Description,
    scripts::{scripts, Call},
    RedisStore,
};
use crate::{
    error::{Error, Result},
    store::{backend::Backend, bad_token, Listed, Listing},
};

/// Most describe.lua runs in one pipeline on one server. Every request of
/// this broker shares one multiplexed connection, whose commands Redis runs
/// in order: a page of 1,000 describes in one pipeline would hold every
/// heartbeat and handoff sent behind it for all of them (10 to 15 ms of
/// Redis time, 10 to 15 µs each, measured 2026-12-05 on a 2-core Xeon
/// VM); in pipelines of 250 sent one after another, a call waits for one
/// batch at most (3 to 4 ms), at the cost of up to three more round trips
/// per page.
const DESCRIBE_BATCH: usize = 250;

/// A Cluster primary, as the cluster connection knows it (`CLUSTER SLOTS`).
/// Ordered by host, then port: the order of the walk.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
struct Node {
    host: String,
    port: u16,
}

/// Where a page starts: a page token read.
#[derive(Debug, PartialEq, Eq)]
struct Position {
    /// The SCAN cursor the page starts from.
    cursor: u64,
    /// For a batch listed in part: the cursor SCAN answered from `cursor`
    /// then, and the hash of the last name listed.
    rest: Option<(u64, u64)>,
    /// On a Cluster, the primary the cursor belongs to.
    node: Option<Node>,
}

impl Position {
    /// Reads a page token; `None` if it is not of the form this store
    /// writes.
    fn read(token: &str) -> Option<Position> {
        let (walk, node) = match token.split_once('@') {
            Some((walk, node)) => {
                let (host, port) = node.rsplit_once(':')?;
                if host.is_empty() || host.contains('@') {
                    return None;
                }
                let port = number(port)?.try_into().ok()?;
                (
                    walk,
                    Some(Node {
                        host: host.to_owned(),
                        port,
                    }),
                )
            }
            None => (token, None),
        };
        let mut fields = walk.split('.');
        let cursor = number(fields.next()?)?;
        let rest = match (fields.next(), fields.next(), fields.next()) {
            (None, _, _) => None,
            (Some(end), Some(hash), None) if hash.len() == 16 => Some((
                number(end)?,
                u64::from_str_radix(hash, 16)
                    .ok()
                    .filter(|_| hash.bytes().all(|b| b.is_ascii_hexdigit()))?,
            )),
            _ => return None,
        };
        Some(Position { cursor, rest, node })
    }

    /// The page token of this position.
    fn token(&self) -> String {
        let mut token = self.cursor.to_string();
        if let Some((end, hash)) = self.rest {
            token.push_str(&format!(".{end}.{hash:016x}"));
        }
        if let Some(node) = &self.node {
            token.push_str(&format!("@{}:{}", node.host, node.port));
        }
        token
    }
}

/// A decimal number of digits only (no sign, no blanks), as the token
/// writes them.
fn number(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// `text` as a Redis glob matching only itself: every character but
/// ASCII letters and digits behind a backslash (which Redis's glob reads
/// as "this character, literally", whatever it is), so that no name
/// character is a wildcard, whatever the glob syntax makes special.
fn glob_escaped(text: &str) -> String {
    let mut glob = String::with_capacity(2 * text.len());
    for c in text.chars() {
        if !c.is_ascii_alphanumeric() {
            glob.push('\\');
        }
        glob.push(c);
    }
    glob
}

/// The name whose hash tag `key` begins with, under the key prefix
/// `key_prefix`; `None` for a key that is no name's (or not UTF-8). A
/// Cluster's fence counters (`{prefix}{<slot tag>}:fences`, one per slot,
/// `keys.rs`) are no name's: left out, they cost no describe (a name whose
/// hash tag is the same is found by its own keys).
fn name_of<'k>(key: &'k [u8], key_prefix: &str) -> Option<&'k str> {
    let tagged = key
        .strip_prefix(key_prefix.as_bytes())?
        .strip_prefix(b"{")?;
    let end = tagged.iter().position(|&b| b == b'}')?;
    if &tagged[end + 1..] == b":fences" {
        return None;
    }
    std::str::from_utf8(&tagged[..end]).ok()
}

/// FNV-1a (64 bits): the fixed order in which a page takes the names of a
/// batch it cannot describe whole. Fixed, not `std`'s hasher, so that a
/// token written by one broker replica (or version) reads the same on
/// another. Two names of one batch with one hash are ordered by name; the
/// token keeps the hash alone, so when a page ends between two such names
/// (a chance of about 2^-64 per pair) the second is left out of the walk.
fn fnv1a(name: &str) -> u64 {
    name.bytes().fold(0xcbf2_9ce4_8422_2325, |hash, b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0100_0000_01b3)
    })
}

/// The names a page takes of a `SCAN` batch (`names`, the batch that
/// `SCAN` answered `end` to), in name order, and, when it leaves some of
/// them for the next page, `(end, the hash of the last taken)`: the
/// `rest` of the next page's token. `rest`: this page's, when it goes on
/// with a batch an earlier page took part of.
///
/// If the batch is the one the earlier page saw (`SCAN` answered the same
/// cursor), the names it took are skipped. If it is not (the names of its
/// buckets changed, or Redis's table was resized), it is taken whole, a
/// little over the budget (by what `SCAN` answered past its `COUNT`):
/// taking its first names again could go on for as long as the store keeps
/// changing under the walk, and skipping the names taken could skip names
/// of buckets the first batch had not reached.
fn take(
    names: BTreeSet<&str>,
    rest: Option<(u64, u64)>,
    end: u64,
    budget: usize,
) -> (Vec<&str>, Option<(u64, u64)>) {
    let (taken, whole) = match rest {
        Some((was, hash)) if was == end => (Some(hash), false),
        Some(_) => (None, true),
        None => (None, false),
    };
    let mut batch: Vec<(u64, &str)> = names
        .into_iter()
        .map(|name| (fnv1a(name), name))
        .filter(|(hash, _)| taken.is_none_or(|last| *hash > last))
        .collect();
    let mut left = None;
    if batch.len() > budget && !whole {
        batch.sort_unstable();
        batch.truncate(budget);
        left = batch.last().map(|(hash, _)| (end, *hash));
    }
    let mut page: Vec<&str> = batch.into_iter().map(|(_, name)| name).collect();
    page.sort_unstable();
    (page, left)
}

impl RedisStore {
    /// [`Backend::list`] (see the module docs).
    pub(super) async fn list_page(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)> {
        let budget = budget.max(1);
        let at = match resume {
            Some(token) => Position::read(token).ok_or_else(bad_token)?,
            None => Position {
                cursor: 0,
                rest: None,
                node: None,
            },
        };
        let mut conn = self.conn()?;
        let (node, primaries) = match &mut conn {
            Conn::Cluster(cluster) => {
                let primaries = self.primaries(cluster).await?;
                let node = match (&at.node, resume) {
                    (Some(node), _) if primaries.contains(node) => node.clone(),
                    // A primary that is gone (a failover), or none of ours.
                    (Some(_), _) | (None, Some(_)) => return Err(bad_token()),
                    (None, None) => primaries.iter().next().cloned().ok_or_else(|| {
                        Error::Unavailable("the Redis Cluster names no primary".into())
                    })?,
                };
                (Some(node), primaries)
            }
            Conn::Single(_) if at.node.is_some() => return Err(bad_token()),
            Conn::Single(_) => (None, BTreeSet::new()),
        };
        let pattern = format!(
            "{}*",
            glob_escaped(&format!("{}{{{prefix}", self.inner.prefix))
        );
        let (end, keys) = self
            .scan(&mut conn, node.as_ref(), at.cursor, &pattern, budget)
            .await?;
        let names: BTreeSet<&str> = keys
            .iter()
            .filter_map(|key| name_of(key, &self.inner.prefix))
            .filter(|name| name.starts_with(prefix))
            .collect();
        let (names, rest) = take(names, at.rest, end, budget);
        let next = if let Some(rest) = rest {
            Some(Position {
                cursor: at.cursor,
                rest: Some(rest),
                node,
            })
        } else if end != 0 {
            Some(Position {
                cursor: end,
                rest: None,
                node,
            })
        } else {
            // This server (or primary) is walked: on to the next primary.
            node.and_then(|node| primaries.into_iter().find(|p| *p > node))
                .map(|next| Position {
                    cursor: 0,
                    rest: None,
                    node: Some(next),
                })
        };
        let names: Vec<String> = names.into_iter().map(str::to_owned).collect();
        let descriptions = self.describe_all(&names).await?;
        let fence = descriptions.iter().map(|d| d.fence).max().unwrap_or(0);
        let entries = names
            .into_iter()
            .zip(descriptions)
            .filter(|(_, d)| !d.described.is_idle())
            .map(|(name, d)| Listed {
                name,
                described: d.described,
            })
            .collect();
        Ok((
            Listing {
                entries,
                next: next.map(|p| p.token()),
            },
            fence,
        ))
    }

    /// One `SCAN` (on a Cluster, on the primary `node`): the cursor it
    /// answers and the keys.
    async fn scan(
        &self,
        conn: &mut Conn,
        node: Option<&Node>,
        cursor: u64,
        pattern: &str,
        count: usize,
    ) -> Result<(u64, Vec<Vec<u8>>)> {
        let mut cmd = redis::cmd("SCAN");
        cmd.arg(cursor)
            .arg("MATCH")
            .arg(pattern)
            .arg("COUNT")
            .arg(count);
        let value: Value = match (conn, node) {
            (Conn::Cluster(cluster), Some(node)) => {
                let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::ByAddress {
                    host: node.host.clone(),
                    port: node.port,
                });
                self.call("list", cluster.route_command(cmd, to)).await?
            }
            (conn @ Conn::Single(_), None) => self.call("list", cmd.query_async(conn)).await?,
            _ => return Err(Error::Internal("list: a SCAN without its node".into())),
        };
        redis::from_redis_value(value)
            .map_err(|e| Error::Internal(format!("Redis list: the SCAN reply: {e}")))
    }

    /// The primaries of the Cluster, as `CLUSTER SLOTS` names them (the
    /// names the cluster connection routes by): every primary serving a
    /// slot, each once, in the walk's order.
    async fn primaries(
        &self,
        cluster: &mut redis::cluster_async::ClusterConnection,
    ) -> Result<BTreeSet<Node>> {
        let mut cmd = redis::cmd("CLUSTER");
        cmd.arg("SLOTS");
        let to = RoutingInfo::SingleNode(SingleNodeRoutingInfo::RandomPrimary);
        let value = self.call("list", cluster.route_command(cmd, to)).await?;
        primaries_of(value)
    }

    /// describe.lua on each of `names`, in order.
    async fn describe_all(&self, names: &[String]) -> Result<Vec<Description>> {
        if self.is_cluster() {
            return self.describe_in_cluster(names).await;
        }
        let mut descriptions = Vec::with_capacity(names.len());
        for batch in names.chunks(DESCRIBE_BATCH) {
            let mut call: Call<'_, Description> =
                scripts(self.inner.record_format).describe.call("list");
            for name in batch {
                let k = self.keys(name);
                call = call.run(&[&k.lease, &k.alive, &k.permits], &[] as &[&str]);
            }
            descriptions.extend(self.run(call).await?.replies);
        }
        crate::store::one_answer_each(descriptions.len(), names.len(), "descriptions", "names")?;
        Ok(descriptions)
    }

    /// [`RedisStore::describe_all`] on a Cluster: one script per name (a
    /// pipeline there goes to one slot), the slots at once, the names of
    /// one slot one after another (as [`RedisStore::renew_many`] does, for
    /// the same reason: redis-rs' cluster connection stalls when many
    /// calls are redirected at the same moment, as the names of a
    /// migrating slot would be).
    async fn describe_in_cluster(&self, names: &[String]) -> Result<Vec<Description>> {
        let mut slots: HashMap<_, Vec<usize>> = HashMap::new();
        for (i, name) in names.iter().enumerate() {
            slots
                .entry(HashSlot::for_key(self.key(name)))
                .or_default()
                .push(i);
        }
        let runs = slots.into_values().map(|indices| async move {
            let mut described = Vec::with_capacity(indices.len());
            for i in indices {
                let (d, fence) = Backend::describe(self, &names[i]).await?;
                described.push((
                    i,
                    Description {
                        described: d,
                        fence,
                    },
                ));
            }
            Ok::<_, Error>(described)
        });
        let mut descriptions: Vec<Option<Description>> = names.iter().map(|_| None).collect();
        for run in futures_util::future::join_all(runs).await {
            for (i, description) in run? {
                descriptions[i] = Some(description);
            }
        }
        descriptions
            .into_iter()
            .map(|d| {
                d.ok_or_else(|| Error::Internal("a listed name without its description".into()))
            })
            .collect()
    }
}

/// The primaries a `CLUSTER SLOTS` reply names: each range is `[start,
/// end, [host, port, id, ...], replicas...]`. A primary named without a
/// usable address (an empty host, a wildcard, `?`: a cluster set to
/// announce none) fails the listing: its keys could not be walked.
fn primaries_of(value: Value) -> Result<BTreeSet<Node>> {
    let unreadable = |what: &str| Error::Internal(format!("Redis CLUSTER SLOTS reply: {what}"));
    let ranges: Vec<Value> =
        redis::from_redis_value(value).map_err(|e| unreadable(&e.to_string()))?;
    let mut primaries = BTreeSet::new();
    for range in ranges {
        let fields: Vec<Value> =
            redis::from_redis_value(range).map_err(|e| unreadable(&e.to_string()))?;
        let primary = fields
            .into_iter()
            .nth(2)
            .ok_or_else(|| unreadable("a slot range without its primary"))?;
        let (host, port): (Option<String>, u16) = match primary {
            Value::Array(node) if node.len() >= 2 => {
                let mut node = node.into_iter();
                let host = node.next().map(redis::from_redis_value).transpose();
                let port = node.next().map(redis::from_redis_value).transpose();
                match (host, port) {
                    (Ok(host), Ok(Some(port))) => (host.flatten(), port),
                    _ => return Err(unreadable("a primary's address")),
                }
            }
            _ => return Err(unreadable("a primary's address")),
        };
        let host = host
            .filter(|h| !matches!(h.as_str(), "" | "?" | "0.0.0.0" | "::"))
            .ok_or_else(|| {
                Error::Unavailable(
                    "a Redis Cluster primary is announced without an address \
                     (cluster-preferred-endpoint-type?): a listing must reach every primary"
                        .into(),
                )
            })?;
        primaries.insert(Node { host, port });
    }
    Ok(primaries)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_read_back_as_written() {
        let positions = [
            Position {
                cursor: 0,
                rest: None,
                node: None,
            },
            Position {
                cursor: 17,
                rest: Some((9, 0x0123_4567_89ab_cdef)),
                node: None,
            },
            Position {
                cursor: u64::MAX,
                rest: Some((0, u64::MAX)),
                node: Some(Node {
                    host: "10.0.0.7".into(),
                    port: 7001,
                }),
            },
            Position {
                cursor: 3,
                rest: None,
                node: Some(Node {
                    host: "::1".into(),
                    port: 6379,
                }),
            },
        ];
        for position in positions {
            let token = position.token();
            // The alphabet lease/listing.rs lets through.
            assert!(
                token.chars().all(|c| c.is_ascii_graphic()
                    && !matches!(c, '{' | '}' | '*' | '?' | '[' | ']' | '\\')),
                "{token}"
            );
            assert_eq!(Position::read(&token), Some(position), "{token}");
        }
    }

    #[test]
    fn tokens_of_no_listing_are_refused() {
        for token in [
            "",
            "x",
            "-1",
            "+1",
            " 1",
            "1.",
            "1.2",
            "1.2.3",
            "1.2.0123456789abcdeg",
            "1.2.0123456789abcdef.4",
            "18446744073709551616",
            "1@",
            "1@host",
            "1@:7000",
            "1@host:70000",
            "1@host:x",
            "1@a@b:1",
            "l/a",
        ] {
            assert_eq!(Position::read(token), None, "{token:?}");
        }
    }

    #[test]
    fn a_prefix_is_matched_as_written() {
        assert_eq!(glob_escaped("a_b*?[x]\\{"), "a\\_b\\*\\?\\[x\\]\\\\\\{");
        assert_eq!(glob_escaped("t|jobs/1.2:a-b"), "t\\|jobs\\/1\\.2\\:a\\-b");
    }

    #[test]
    fn keys_name_their_name() {
        for (key, name) in [
            ("p:{a/b}", Some("a/b")),
            ("p:{a/b}:line", Some("a/b")),
            ("p:{t|x}:permits:end:00ff", Some("t|x")),
            ("p:{}", Some("")),
            ("p:fences", None),
            ("p:{1a2}:fences", None),
            ("p:{1a2}:permits", Some("1a2")),
            ("q:{a}", None),
            ("p:{a", None),
        ] {
            assert_eq!(name_of(key.as_bytes(), "p:"), name, "{key}");
        }
        assert_eq!(name_of(b"p:{\xff}", "p:"), None);
    }

    /// A batch over the budget is taken in pages of the budget, each in
    /// name order, together all of it, each name once; a batch that
    /// changed in between is taken whole.
    #[test]
    fn a_batch_over_the_budget_is_taken_in_pages() {
        let batch: BTreeSet<&str> = ["a", "b", "c", "d", "e", "f", "g"].into();
        let (mut seen, mut rest, mut pages) = (Vec::new(), None, 0);
        loop {
            let (page, left) = take(batch.clone(), rest, 42, 3);
            assert!(page.len() <= 3, "{page:?}");
            assert!(page.windows(2).all(|w| w[0] < w[1]), "{page:?}");
            seen.extend(page);
            pages += 1;
            match left {
                Some(left) => {
                    assert_eq!(left.0, 42);
                    rest = Some(left);
                }
                None => break,
            }
        }
        assert_eq!(pages, 3);
        seen.sort_unstable();
        assert_eq!(seen, batch.iter().copied().collect::<Vec<_>>());
        // Within the budget: whole, nothing left.
        assert_eq!(take(batch.clone(), None, 42, 7), (seen.clone(), None));
        // The batch changed (SCAN answered another cursor): whole.
        let (_, left) = take(batch.clone(), None, 42, 3);
        assert_eq!(take(batch.clone(), left, 43, 3), (seen, None));
    }

    #[test]
    fn the_hash_is_fnv1a() {
        // The published FNV-1a 64 test vectors: tokens of other brokers
        // read the same.
        assert_eq!(fnv1a(""), 0xcbf2_9ce4_8422_2325);
        assert_eq!(fnv1a("a"), 0xaf63_dc4c_8601_ec8c);
        assert_eq!(fnv1a("foobar"), 0x8594_4171_f739_67e8);
    }

    #[test]
    fn cluster_slots_name_the_primaries() {
        let node = |host: &str, port: i64| {
            Value::Array(vec![
                Value::BulkString(host.as_bytes().to_vec()),
                Value::Int(port),
                Value::BulkString(b"id".to_vec()),
            ])
        };
        let range = |start, end, nodes: Vec<Value>| {
            let mut fields = vec![Value::Int(start), Value::Int(end)];
            fields.extend(nodes);
            Value::Array(fields)
        };
        let reply = Value::Array(vec![
            range(
                0,
                5000,
                vec![node("10.0.0.2", 7000), node("10.0.0.9", 7000)],
            ),
            range(5001, 9000, vec![node("10.0.0.1", 7001)]),
            range(9001, 16383, vec![node("10.0.0.2", 7000)]),
        ]);
        let primaries: Vec<Node> = primaries_of(reply).unwrap().into_iter().collect();
        assert_eq!(
            primaries,
            [
                Node {
                    host: "10.0.0.1".into(),
                    port: 7001
                },
                Node {
                    host: "10.0.0.2".into(),
                    port: 7000
                }
            ]
        );
        let unnamed = Value::Array(vec![range(0, 16383, vec![node("", 7000)])]);
        assert!(matches!(primaries_of(unnamed), Err(Error::Unavailable(_))));
        assert!(matches!(
            primaries_of(Value::Int(3)),
            Err(Error::Internal(_))
        ));
    }
}
