//! The etcd store's keys and values: everything about one name lives under
//! one prefix, `{prefix}{name}|`, so that one range read sees it all and
//! one watcher hears it all. A lock name has no `|` (names are
//! `[A-Za-z0-9._:/-]`), so no name's range holds another's keys, but for
//! one: a tenant's names are stored as `tenant|name`, so a name of the root
//! namespace that is also a tenant's id holds that tenant's keys in its
//! range (a listing's walk minds it: [`walked_to`]).
//!
//! | key under `{prefix}{name}|` | value | on the etcd lease | what |
//! |---|---|---|---|
//! | `l` | [`Holding`] | the grant's own (G) | the lock; its `create_revision` is the fence's |
//! | `s|{slot}` | [`Holding`] | that permit's own (G) | a semaphore permit, slot 0..limit |
//! | `h|{token}` | [`Record`] | R: TTL + lock-delay + linger | the lease's record, for its holder to hear "expired" once after G ended |
//! | `e|{token}` | [`End`] | the linger lease | how the token's lease ended (released, revoked, expired and reported) |
//! | `d` | the delay | D: TTL + lock-delay, kept alive with G | the lock-delay after an involuntary end; `create_revision` = the grant's |
//! | `v` | fence | the linger lease | the last revocation, for a retried revoke |
//! | `q|{token}` | empty | the place's own (3 s, QUEUE_LIFETIME) | a place in the wait line; order = `create_revision` |
//!
//! and one key beside the names, `{prefix}|epoch`, the fence base
//! (`super`'s module docs). Every key is on an etcd lease but the epoch:
//! nothing grows per distinct name.

use std::fmt::Write as _;

/// The keys of one name.
#[derive(Clone)]
pub(super) struct NameKeys {
    /// `{prefix}{name}|`.
    base: Vec<u8>,
}

impl NameKeys {
    pub fn new(prefix: &str, name: &str) -> NameKeys {
        let mut base = Vec::with_capacity(prefix.len() + name.len() + 1);
        base.extend_from_slice(prefix.as_bytes());
        base.extend_from_slice(name.as_bytes());
        base.push(b'|');
        NameKeys { base }
    }

    fn key(&self, suffix: &[u8], token: &str) -> Vec<u8> {
        let mut key = Vec::with_capacity(self.base.len() + suffix.len() + token.len());
        key.extend_from_slice(&self.base);
        key.extend_from_slice(suffix);
        key.extend_from_slice(token.as_bytes());
        key
    }

    /// Every key of the name: `[start, end)`.
    pub fn all(&self) -> (Vec<u8>, Vec<u8>) {
        (self.base.clone(), prefix_end(&self.base))
    }

    pub fn lock(&self) -> Vec<u8> {
        self.key(b"l", "")
    }

    pub fn delay(&self) -> Vec<u8> {
        self.key(b"d", "")
    }

    pub fn revoked(&self) -> Vec<u8> {
        self.key(b"v", "")
    }

    pub fn slot(&self, slot: u32) -> Vec<u8> {
        self.key(b"s|", &slot.to_string())
    }

    pub fn slots(&self) -> (Vec<u8>, Vec<u8>) {
        range(self.key(b"s|", ""))
    }

    pub fn record(&self, token: &str) -> Vec<u8> {
        self.key(b"h|", token)
    }

    pub fn records(&self) -> (Vec<u8>, Vec<u8>) {
        range(self.key(b"h|", ""))
    }

    pub fn end(&self, token: &str) -> Vec<u8> {
        self.key(b"e|", token)
    }

    pub fn place(&self, token: &str) -> Vec<u8> {
        self.key(b"q|", token)
    }

    pub fn places(&self) -> (Vec<u8>, Vec<u8>) {
        range(self.key(b"q|", ""))
    }

    /// What a key of this name is, by its suffix.
    pub fn kind(&self, key: &[u8]) -> Option<KeyKind> {
        let suffix = key.strip_prefix(self.base.as_slice())?;
        Some(match suffix {
            b"l" => KeyKind::Lock,
            b"d" => KeyKind::Delay,
            _ if suffix.starts_with(b"s|") => KeyKind::Slot,
            _ if suffix.starts_with(b"q|") => KeyKind::Place,
            _ => KeyKind::Other,
        })
    }

    /// The token of a record, end or place key.
    pub fn token_of<'k>(&self, key: &'k [u8]) -> Option<&'k str> {
        let suffix = key.strip_prefix(self.base.as_slice())?;
        std::str::from_utf8(suffix.get(2..)?).ok()
    }
}

/// The keys of the names that start with `name_prefix`: `[start, end)`.
/// A name's keys all start with the name (then `|`), so every key of such
/// a name is in it; so are the keys of a shorter name whose `|` and suffix
/// continue the prefix (`a` for `a|`), which [`name_of`]'s caller drops.
pub(super) fn names_from(prefix: &str, name_prefix: &str) -> (Vec<u8>, Vec<u8>) {
    range(format!("{prefix}{name_prefix}").into_bytes())
}

/// The intervals of keys one listing page reads, one Range each, in
/// order, narrow ones first, each starting where the last ended.
///
/// Why not one Range of the whole rest with a `limit`: etcd (before 3.7)
/// counts every key of a Range's interval for its answer's `count`, limit
/// or not (etcd#11057, etcd#16510), in its in-memory index under a read
/// lock that its writes wait for: a page at the start of 200,000 keys took
/// 72 ms so, near their end 3 ms. Here the first interval is the keys that
/// share all but the last byte of the start, and each next one shares
/// fewer: one byte less, then two, four..., never wider than the walk's
/// range. Names sharing a prefix (`jobs/0001`...) fill a page in two or
/// three Ranges of about its size; a key space with a page's worth of keys
/// only after a gap of few prefixes still reads as much as one Range would,
/// and so does the first page of a walk: from the prefix itself, nothing
/// narrower is known. A walk then counts each key about once, not once per
/// page.
pub(super) struct Probes {
    /// Where the next interval starts.
    from: Vec<u8>,
    /// The end of the walk's range (`[0]`: the end of the key space).
    end: Vec<u8>,
    /// The length of the walk's own prefix: no interval is cut shorter.
    floor: usize,
    /// The length of the prefix the last interval's keys shared.
    cut: usize,
    /// How many bytes shorter the next one's is.
    step: usize,
}

impl Probes {
    /// The intervals of `[start, end)` (keys of the prefix `start[..floor]`).
    pub fn new(start: Vec<u8>, end: Vec<u8>, floor: usize) -> Probes {
        Probes {
            cut: start.len(),
            from: start,
            end,
            floor,
            step: 1,
        }
    }

    /// The next interval `[from, to)`, and whether it is the last (it ends
    /// at the walk's end); `None` once the last was given.
    pub fn next(&mut self) -> Option<(Vec<u8>, Vec<u8>, bool)> {
        if self.step == 0 {
            return None;
        }
        let depth = self
            .cut
            .saturating_sub(self.step)
            .max(self.floor)
            .min(self.from.len());
        let narrow = (depth > self.floor).then(|| prefix_end(&self.from[..depth]));
        let (to, last) = match narrow {
            Some(to) if to != [0] && (self.end == [0] || to < self.end) => (to, false),
            _ => (self.end.clone(), true),
        };
        let from = std::mem::replace(&mut self.from, to.clone());
        self.cut = depth;
        self.step = if last { 0 } else { self.step * 2 };
        Some((from, to, last))
    }
}

/// The first key after every key of `name` (`{prefix}{name}|` and all
/// under it). Keys of names that extend `name` by a name character (`a/1`
/// after `a`) sort before it, as every such character sorts below `|`.
pub(super) fn after_name(prefix: &str, name: &str) -> Vec<u8> {
    NameKeys::new(prefix, name).all().1
}

/// The page token of a listing's walk whose page ended on `key` (the last
/// key it read): where the next page starts ([`resume_at`]).
///
/// Mostly the key's name: the next page starts after every key of it.
/// But a name of the root namespace that is also a tenant's id (`acme`,
/// and tenant `acme`'s `acme|x`) has that tenant's keys among its own, as
/// `|` both ends a name and follows a tenant id; resuming after all of
/// `acme|` would pass over them. So a page that ends on a root name's own
/// key resumes after that key (`acme|l|`: the lock, lock-delay or revoke
/// key) or after that key's family (`acme|e|`: its end records, records,
/// places or permits), and the name may be listed again on the next page.
/// A key that is no name's (the epoch, something else's under the prefix)
/// is read as a name, so that the walk moves past it; `None` for one that
/// is not text, or whose token would not resume past it (a walk must never
/// read the same page again).
pub(super) fn walked_to(prefix: &str, key: &[u8]) -> Option<String> {
    let rest = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    let token = match name_of(prefix, key) {
        Some(name) if name.contains('|') => name.to_owned(),
        Some(name) => {
            let family = rest.get(name.len() + 1..name.len() + 2)?;
            format!("{name}|{family}|")
        }
        None if rest.is_empty() => return None,
        None => rest.to_owned(),
    };
    resume_at(prefix, &token)
        .is_some_and(|next| next.as_slice() > key)
        .then_some(token)
}

/// The first key of the page after the one [`walked_to`] gave `token`;
/// `None` for a token it cannot have given (the empty one).
pub(super) fn resume_at(prefix: &str, token: &str) -> Option<Vec<u8>> {
    if token.is_empty() {
        return None;
    }
    // A root name's own key (`acme|l|`) or key family (`acme|e|`): no name
    // ends with `|`.
    if let Some((name, family)) = token
        .strip_suffix('|')
        .and_then(|key| key.rsplit_once('|'))
        .filter(|(name, _)| !name.is_empty() && !name.contains('|'))
    {
        match family {
            "l" | "d" | "v" => {
                let mut after = format!("{prefix}{name}|{family}").into_bytes();
                after.push(0);
                return Some(after);
            }
            "s" | "h" | "e" | "q" => {
                return Some(prefix_end(format!("{prefix}{token}").as_bytes()))
            }
            _ => {}
        }
    }
    Some(after_name(prefix, token))
}

/// The name a key of the store's belongs to (the key without `prefix`,
/// then as this module's table lays it out), or `None` for another key
/// (the epoch, or one written by something else under the prefix). A
/// stored name holds at most one `|` (a tenant's, `tenant|name`), and so
/// `a|q|l` reads as tenant `a`'s lock `q`, not as a place in name `a`'s
/// line with the token `l`: the broker's tokens are 32 hex digits.
pub(super) fn name_of<'k>(prefix: &str, key: &'k [u8]) -> Option<&'k str> {
    let rest = std::str::from_utf8(key.strip_prefix(prefix.as_bytes())?).ok()?;
    let (head, last) = rest.rsplit_once('|')?;
    let name = if matches!(last, "l" | "d" | "v") {
        head
    } else {
        let (name, family) = head.rsplit_once('|')?;
        if !matches!(family, "s" | "h" | "e" | "q") {
            return None;
        }
        name
    };
    (!name.is_empty()).then_some(name)
}

/// The kinds of a name's keys a watcher tells apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum KeyKind {
    Lock,
    Delay,
    Slot,
    Place,
    Other,
}

/// The key of the fence base.
pub(super) fn epoch_key(prefix: &str) -> Vec<u8> {
    format!("{prefix}|epoch").into_bytes()
}

/// `[prefix, end)`: every key that starts with `prefix`.
fn range(prefix: Vec<u8>) -> (Vec<u8>, Vec<u8>) {
    let end = prefix_end(&prefix);
    (prefix, end)
}

/// The first key after every key that starts with `prefix` (etcd's
/// `GetPrefixRangeEnd`).
pub(super) fn prefix_end(prefix: &[u8]) -> Vec<u8> {
    let mut end = prefix.to_vec();
    while let Some(last) = end.pop() {
        if last < 0xff {
            end.push(last + 1);
            return end;
        }
    }
    // All 0xff: to the end of the keyspace.
    vec![0]
}

/// A lock's or a permit's value: the owner token, the TTL and lock-delay
/// asked for, the grant time, the holder label (last: it may hold any
/// byte), `\0` between them.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct Holding {
    pub token: String,
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
    /// The granting broker's wall clock (informational: etcd has none).
    pub granted_at_unix_ms: u64,
    pub holder: String,
}

impl Holding {
    /// A holding whose value could not be read (written by something else
    /// under the prefix): held, by nobody anyone can name.
    pub fn unreadable() -> Holding {
        Holding {
            token: String::new(),
            ttl_ms: 1_000,
            lock_delay_ms: 0,
            granted_at_unix_ms: 0,
            holder: String::new(),
        }
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut value = String::with_capacity(self.token.len() + self.holder.len() + 40);
        let _ = write!(
            value,
            "{}\0{}\0{}\0{}\0{}",
            self.token, self.ttl_ms, self.lock_delay_ms, self.granted_at_unix_ms, self.holder
        );
        value.into_bytes()
    }

    pub fn decode(value: &[u8]) -> Option<Holding> {
        let value = std::str::from_utf8(value).ok()?;
        let mut parts = value.splitn(5, '\0');
        Some(Holding {
            token: parts.next()?.to_owned(),
            ttl_ms: parts.next()?.parse().ok()?,
            lock_delay_ms: parts.next()?.parse().ok()?,
            granted_at_unix_ms: parts.next()?.parse().ok()?,
            holder: parts.next()?.to_owned(),
        })
    }
}

/// A lease's record (`h|{token}`), on its own lease R; its lease G and
/// lock-delay lease D (0: none) are what a renewal keeps alive with R.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Record {
    /// The permit's slot, or `None` for the lock.
    pub slot: Option<u32>,
    pub lease: i64,
    pub delay_lease: i64,
    pub ttl_ms: u64,
    pub lock_delay_ms: u64,
}

impl Record {
    pub fn encode(&self) -> Vec<u8> {
        let slot = self
            .slot
            .map_or_else(|| "l".to_owned(), |s| format!("s{s}"));
        format!(
            "{slot}\0{}\0{}\0{}\0{}",
            self.lease, self.delay_lease, self.ttl_ms, self.lock_delay_ms
        )
        .into_bytes()
    }

    pub fn decode(value: &[u8]) -> Option<Record> {
        let value = std::str::from_utf8(value).ok()?;
        let mut parts = value.split('\0');
        let slot = match parts.next()? {
            "l" => None,
            s => Some(s.strip_prefix('s')?.parse().ok()?),
        };
        Some(Record {
            slot,
            lease: parts.next()?.parse().ok()?,
            delay_lease: parts.next()?.parse().ok()?,
            ttl_ms: parts.next()?.parse().ok()?,
            lock_delay_ms: parts.next()?.parse().ok()?,
        })
    }
}

/// How a token's lease ended (`e|{token}`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum End {
    Released,
    Revoked { fence: u64 },
    ExpiredReported,
}

impl End {
    pub fn encode(self) -> Vec<u8> {
        match self {
            End::Released => b"x".to_vec(),
            End::Revoked { fence } => format!("r{fence}").into_bytes(),
            End::ExpiredReported => b"e".to_vec(),
        }
    }

    pub fn decode(value: &[u8]) -> Option<End> {
        match value.split_first()? {
            (b'x', _) => Some(End::Released),
            (b'e', _) => Some(End::ExpiredReported),
            (b'r', fence) => Some(End::Revoked {
                fence: std::str::from_utf8(fence).ok()?.parse().ok()?,
            }),
            _ => None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn values_read_back_as_written() {
        let holding = Holding {
            token: "t1".into(),
            ttl_ms: 1500,
            lock_delay_ms: 0,
            granted_at_unix_ms: 17,
            holder: "pod\0with:odd|bytes".into(),
        };
        assert_eq!(Holding::decode(&holding.encode()), Some(holding));
        let record = Record {
            slot: Some(3),
            lease: 7,
            delay_lease: 0,
            ttl_ms: 900,
            lock_delay_ms: 5,
        };
        assert_eq!(Record::decode(&record.encode()), Some(record));
        let lock = Record {
            slot: None,
            ..record
        };
        assert_eq!(Record::decode(&lock.encode()), Some(lock));
        for end in [
            End::Released,
            End::ExpiredReported,
            End::Revoked { fence: 99 },
        ] {
            assert_eq!(End::decode(&end.encode()), Some(end));
        }
    }

    #[test]
    fn a_name_range_holds_only_its_own_keys() {
        let a = NameKeys::new("p:", "a");
        let ab = NameKeys::new("p:", "a/b");
        let (start, end) = a.all();
        for key in [ab.lock(), ab.record("t"), NameKeys::new("p:", "ab").lock()] {
            assert!(!(start <= key && key < end), "{key:?}");
        }
        for key in [a.lock(), a.slot(3), a.place("w"), a.end("t"), a.delay()] {
            assert!(start <= key && key < end);
        }
        assert_eq!(a.kind(&a.slot(2)), Some(KeyKind::Slot));
        assert_eq!(a.kind(&a.lock()), Some(KeyKind::Lock));
        assert_eq!(a.token_of(&a.place("w1")), Some("w1"));
        assert_eq!(prefix_end(b"a\xff"), b"b");
    }

    /// Every key of a name reads back as the name, a tenant's name (with
    /// its `|`) included; the epoch and foreign keys as no name.
    #[test]
    fn a_key_names_its_name() {
        for name in ["a", "a_b/1", "t-1|x.y:z", "q", "acme|q"] {
            let keys = NameKeys::new("p:", name);
            for key in [
                keys.lock(),
                keys.delay(),
                keys.revoked(),
                keys.slot(12),
                keys.record("0123abcd"),
                keys.end("0123abcd"),
                keys.place("0123abcd"),
            ] {
                assert_eq!(name_of("p:", &key), Some(name), "{key:?}");
            }
            let (start, end) = names_from("p:", name);
            assert!(start <= keys.lock() && keys.lock() < end);
            // A longer name came before it in the walk.
            assert!(NameKeys::new("p:", &format!("{name}/0")).lock() < keys.delay());
        }
        assert_eq!(name_of("p:", &epoch_key("p:")), None);
        assert_eq!(name_of("p:", b"p:a|x|y"), None);
        assert_eq!(name_of("p:", b"p:|l"), None);
        assert_eq!(name_of("p:", b"other:a|l"), None);
        assert_eq!(name_of("p:", b"p:a\xff|l"), None);
    }

    /// The intervals of a page cover the walk's range from its start, in
    /// order, without gaps or overlaps; a page of dense names after the
    /// first is read in a few Ranges that count few more keys than it
    /// takes.
    #[test]
    fn a_page_reads_narrow_intervals_first() {
        let mut keys: Vec<Vec<u8>> = (0..100_000)
            .flat_map(|i| {
                let name = NameKeys::new("p:", &format!("n/{i:06}"));
                [name.lock(), name.record("ab12")]
            })
            .collect();
        keys.sort();
        let (start, end) = names_from("p:", "n/");
        for (from, budget) in [
            (start.clone(), 100),
            (after_name("p:", "n/050000"), 100),
            (after_name("p:", "n/099990"), 100),
            (start.clone(), 1_000),
        ] {
            let mut probes = Probes::new(from.clone(), end.clone(), start.len());
            let (mut read, mut counted, mut ranges, mut at) = (Vec::new(), 0, 0, from.clone());
            while let Some((a, b, last)) = probes.next() {
                assert_eq!(a, at, "a gap or an overlap");
                at = b.clone();
                ranges += 1;
                let inside: Vec<&Vec<u8>> = keys
                    .iter()
                    .filter(|k| **k >= a && (last || **k < b))
                    .collect();
                counted += inside.len();
                read.extend(inside.into_iter().take(budget - read.len()).cloned());
                if read.len() == budget || last {
                    break;
                }
            }
            let wanted: Vec<Vec<u8>> = keys
                .iter()
                .filter(|k| **k >= from)
                .take(budget)
                .cloned()
                .collect();
            assert_eq!(read, wanted);
            assert!(ranges <= 4, "{ranges} Ranges for a page of {budget}");
            // From the prefix itself nothing narrower is known: one Range
            // of the prefix's keys, as any first page.
            if from != start {
                assert!(
                    counted <= 20 * budget,
                    "{counted} keys counted for a page of {budget}"
                );
            }
        }
        // Nothing after the start: one interval, to the end.
        let mut probes = Probes::new(end.clone(), end.clone(), start.len());
        assert!(probes.next().is_some_and(|(_, to, last)| last && to == end));
        assert!(probes.next().is_none());
    }

    /// A page that ends on a key resumes past it and past nothing of
    /// another name: after a tenant's name, all its keys; after a root
    /// name's own key, that key or its family, not the names of the tenant
    /// whose id it is, nested among its keys.
    #[test]
    fn a_walk_resumes_past_the_last_key_and_no_other_name() {
        let resume = |key: &[u8]| {
            let token = walked_to("p:", key).expect("a token");
            (token.clone(), resume_at("p:", &token).expect("a start"))
        };
        let acme = NameKeys::new("p:", "acme");
        let tenants = ["acme|a", "acme|l/1", "acme|m", "acme|x", "acme|l"];
        for key in [acme.lock(), acme.delay(), acme.revoked()] {
            let (token, start) = resume(&key);
            assert!(token.ends_with('|'), "{token}");
            assert!(start > key, "{token}");
            for tenant in tenants {
                let lock = NameKeys::new("p:", tenant).lock();
                assert!(
                    lock < key || lock >= start,
                    "{tenant} passed over by {token}"
                );
            }
        }
        for (key, last_of_family) in [
            (acme.end("ab12"), acme.end("ffff")),
            (acme.record("ab12"), acme.record("ffff")),
            (acme.place("ab12"), acme.place("ffff")),
            (acme.slot(3), acme.slot(99)),
        ] {
            let (token, start) = resume(&key);
            assert!(start > last_of_family, "{token}");
            for tenant in tenants {
                let lock = NameKeys::new("p:", tenant).lock();
                assert!(
                    lock < key || lock >= start,
                    "{tenant} passed over by {token}"
                );
            }
        }
        // After a tenant's name: past all its keys, before the next name's.
        let x = NameKeys::new("p:", "acme|x");
        let (token, start) = resume(&x.record("ab12"));
        assert_eq!(token, "acme|x");
        assert!(start > x.place("ffff") && start > x.revoked());
        assert!(start < NameKeys::new("p:", "acme|y").delay());
        // The epoch and foreign keys are walked past; the empty token is
        // none a walk gives.
        let (token, start) = resume(&epoch_key("p:"));
        assert!(start > epoch_key("p:"), "{token}");
        let (_, start) = resume(b"p:odd|");
        assert!(start.as_slice() > b"p:odd|".as_slice());
        // One whose token would start the next page before it: none.
        assert_eq!(walked_to("p:", b"p:x|l|"), None);
        assert_eq!(resume_at("p:", ""), None);
    }
}
