//! Where a name's nodes live under the store's chroot
//! (docs/design/zookeeper.md, section 3.2).
//!
//! Names are spread over [`BUCKETS`] bucket nodes by a hash of the name,
//! because ZooKeeper answers `getChildren` whole, unpaged and within one
//! message (`jute.maxbuffer`, about 1 MB): a flat parent of every name would
//! fail past some 20,000 names, and no listing could stay within a budget.
//! Under its bucket, each name is a node whose children are its records:
//! the lock's lease, each semaphore permit, the lock-delay, the end record
//! of each token, and the places in line. Everything a name needs lives
//! under its node, so that when its last record goes, nothing of the name
//! is left (the node is a container, which ZooKeeper deletes once empty).

/// The parent of the buckets.
pub const NAMES: &str = "/n";

/// How many buckets the names are spread over: 4,096 (three hex digits),
/// so that a bucket's children stay a few hundred at a million names.
pub const BUCKETS: u16 = 4096;

/// The name of a name's lock lease node.
pub const LOCK: &str = "lock";

/// The name of a name's lock-delay node.
pub const DELAY: &str = "delay";

/// The prefix of a semaphore permit's node (`p-<token>`).
pub const PERMIT_PREFIX: &str = "p-";

/// The prefix of a token's end record (`e-<token>`).
pub const END_PREFIX: &str = "e-";

/// The prefix of a place in line (`q-`, then ZooKeeper's 10-digit
/// sequence number).
pub const PLACE_PREFIX: &str = "q-";

/// The bucket of a stored name: FNV-1a (64 bits) of its bytes, modulo
/// [`BUCKETS`]. The hash is this function's, not the standard library's
/// (whose `DefaultHasher` may change between releases): every broker of
/// every version must put a name in the same bucket.
pub fn bucket(name: &str) -> u16 {
    const OFFSET: u64 = 0xcbf2_9ce4_8422_2325;
    const PRIME: u64 = 0x0000_0100_0000_01b3;
    let hash = name
        .bytes()
        .fold(OFFSET, |h, b| (h ^ u64::from(b)).wrapping_mul(PRIME));
    u16::try_from(hash % u64::from(BUCKETS)).unwrap_or(0)
}

/// The path of bucket `b`: `/n/` and three hex digits.
pub fn bucket_path(b: u16) -> String {
    format!("{NAMES}/{b:03x}")
}

/// The node name of a stored name: one path segment. `/` and `%` are
/// percent-encoded (a lock name may hold `/`, and `%` must then be told
/// apart), and `.` and `..`, which ZooKeeper refuses as segments, are
/// encoded whole; every other character of the name and tenant alphabets
/// (`[A-Za-z0-9._:/-]`, `|`, `@`) is one ZooKeeper takes as it is.
pub fn segment(name: &str) -> String {
    match name {
        "." => return "%2E".into(),
        ".." => return "%2E%2E".into(),
        _ => {}
    }
    let mut encoded = String::with_capacity(name.len());
    for c in name.chars() {
        match c {
            '/' => encoded.push_str("%2F"),
            '%' => encoded.push_str("%25"),
            c => encoded.push(c),
        }
    }
    encoded
}

/// The stored name of a node name: [`segment`] undone; `None` for a node
/// name it cannot have made.
pub fn name_of(segment: &str) -> Option<String> {
    let mut name = String::with_capacity(segment.len());
    let mut rest = segment;
    while let Some(at) = rest.find('%') {
        name.push_str(&rest[..at]);
        let code = rest.get(at + 1..at + 3)?;
        name.push(match code {
            "2F" => '/',
            "25" => '%',
            "2E" => '.',
            _ => return None,
        });
        rest = &rest[at + 3..];
    }
    name.push_str(rest);
    // A `.` is encoded only as a whole segment of its own, or twice.
    if segment.contains("%2E") && name != "." && name != ".." {
        return None;
    }
    Some(name)
}

/// The path of a stored name's node, and of its records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct NamePaths {
    /// `/n/<bucket>/<segment>`.
    pub node: String,
    /// The ACL the name's nodes are created with: the store's
    /// (`ZooKeeper::acls`), carried with the paths so that every node a
    /// request writes gets it.
    pub acls: zookeeper_client::Acls<'static>,
}

impl NamePaths {
    /// The paths of `name` (as stored: with its tenant's prefix), its nodes
    /// to be created with `acls`.
    pub fn new(name: &str, acls: zookeeper_client::Acls<'static>) -> Self {
        NamePaths {
            node: format!("{}/{}", bucket_path(bucket(name)), segment(name)),
            acls,
        }
    }

    /// A record of the name: `<node>/<child>`.
    pub fn child(&self, child: &str) -> String {
        format!("{}/{child}", self.node)
    }

    /// The lock lease's node.
    pub fn lock(&self) -> String {
        self.child(LOCK)
    }

    /// The lock-delay's node.
    pub fn delay(&self) -> String {
        self.child(DELAY)
    }

    /// `token`'s permit.
    pub fn permit(&self, token: &str) -> String {
        self.child(&format!("{PERMIT_PREFIX}{token}"))
    }

    /// `token`'s end record.
    pub fn end(&self, token: &str) -> String {
        self.child(&format!("{END_PREFIX}{token}"))
    }

    /// The prefix a new place is created with (ZooKeeper appends its
    /// sequence number).
    pub fn place_prefix(&self) -> String {
        self.child(PLACE_PREFIX)
    }

    /// The prefix of `token`'s place: `q-<token>-`, then ZooKeeper's
    /// sequence number (the token in the node's name, so that one listing
    /// of the children gives the line).
    pub fn place_of(&self, token: &str) -> String {
        self.child(&format!("{PLACE_PREFIX}{token}-"))
    }
}

/// The line of a name, from its children: each place's token and node
/// name, in arrival order (the sequence number ZooKeeper gave it).
pub fn line(children: &[String]) -> Vec<(String, String)> {
    let mut places: Vec<(u64, String, String)> = children
        .iter()
        .filter_map(|child| {
            let rest = child.strip_prefix(PLACE_PREFIX)?;
            let (token, seq) = rest.rsplit_once('-')?;
            Some((seq.parse().ok()?, token.to_owned(), child.clone()))
        })
        .collect();
    places.sort_unstable_by_key(|(seq, _, _)| *seq);
    places
        .into_iter()
        .map(|(_, token, node)| (token, node))
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_name_always_lands_in_the_same_bucket() {
        // Fixed values: a change of the hash would move every name of a
        // running cluster (a rolling upgrade would grant one lock twice).
        assert_eq!(bucket(""), 0x325);
        assert_eq!(bucket("jobs/nightly"), bucket("jobs/nightly"));
        assert_eq!(bucket_path(0x0a7), "/n/0a7");
        let spread: std::collections::BTreeSet<u16> =
            (0..10_000).map(|i| bucket(&format!("name-{i}"))).collect();
        assert!(spread.len() > 3_500, "{} buckets used", spread.len());
        assert!(spread.iter().all(|b| *b < BUCKETS));
    }

    #[test]
    fn a_name_is_one_segment_and_comes_back() {
        for name in [
            "jobs/nightly",
            "a%2Fb",
            "t1|reports/2026-12-05",
            "@census",
            ".",
            "..",
            "a.b",
            "...",
            "x:y_z-1",
        ] {
            let s = segment(name);
            assert!(!s.contains('/'), "{name}: {s}");
            assert!(s != "." && s != "..", "{name}: {s}");
            assert_eq!(name_of(&s).as_deref(), Some(name), "{name}: {s}");
        }
        assert_eq!(segment("a/b%c"), "a%2Fb%25c");
        for foreign in ["%", "%2", "%41", "a%2E"] {
            assert_eq!(name_of(foreign), None, "{foreign}");
        }
    }

    #[test]
    fn a_names_records_are_under_its_node() {
        let paths = NamePaths::new("t|jobs/x", zookeeper_client::Acls::anyone_all());
        assert_eq!(
            paths.node,
            format!("/n/{:03x}/t|jobs%2Fx", bucket("t|jobs/x"))
        );
        assert_eq!(paths.lock(), format!("{}/lock", paths.node));
        assert_eq!(paths.permit("ab12"), format!("{}/p-ab12", paths.node));
        assert_eq!(paths.end("ab12"), format!("{}/e-ab12", paths.node));
        assert_eq!(paths.delay(), format!("{}/delay", paths.node));
        assert_eq!(paths.place_prefix(), format!("{}/q-", paths.node));
        assert_eq!(paths.place_of("ab12"), format!("{}/q-ab12-", paths.node));
    }

    #[test]
    fn the_line_is_the_places_in_sequence_order() {
        let children: Vec<String> = [
            "q-b-0000000012",
            "lock",
            "q-a-0000000003",
            "p-x",
            "q-c-000000000x",
        ]
        .iter()
        .map(|s| (*s).to_owned())
        .collect();
        assert_eq!(
            line(&children),
            [
                ("a".to_owned(), "q-a-0000000003".to_owned()),
                ("b".to_owned(), "q-b-0000000012".to_owned())
            ]
        );
    }
}
