//! The Redis keys of a name. Everything about one name lives under its hash
//! tag (`{prefix}{name}`), so on a Redis Cluster it all sits in one hash
//! slot and every script touches one slot; the one key shared between names,
//! the fence counter, is one per hash slot there, tagged into that slot.

use std::{collections::HashMap, sync::OnceLock};

/// A Redis Cluster hash slot (redis-rs' type), named apart from the tenant
/// cap slots and watch entries of the rest of the broker.
pub(super) type HashSlot = redis::cluster_routing::Slot;

/// The keys of one name; all share its hash tag, hence its Cluster slot.
pub(super) struct NameKeys {
    /// The lease record: `{prefix}{name}` (`lua/record.lua`).
    pub lease: String,
    /// The wait line (a sorted set, token -> arrival sequence: line.lua).
    /// Brokers before issue 15 kept a list under `:queue` instead: new
    /// names, so that old and new brokers side by side during a rollout
    /// never read each other's structure (each keeps its own line; the
    /// lease itself is shared, so mutual exclusion holds throughout).
    pub queue: String,
    /// The places of the line (a sorted set, token -> ms deadline); before
    /// issue 15, `:alive`.
    pub alive: String,
    /// The semaphore permits (a hash).
    pub permits: String,
    /// The fence counter of the name's slot (shared with other names).
    pub fences: String,
}

impl NameKeys {
    /// The keys of `name` under `prefix`; `cluster`: the store is a Redis
    /// Cluster (one fence counter per hash slot rather than one in all).
    pub fn new(prefix: &str, name: &str, cluster: bool) -> Self {
        let lease = lease_key(prefix, name);
        NameKeys {
            queue: format!("{lease}:line"),
            alive: format!("{lease}:until"),
            permits: permits_key(&lease),
            fences: fence_counter_key(prefix, &lease, cluster),
            lease,
        }
    }
}

/// `{prefix}{name}`: the braces make `name` the Redis Cluster hash tag.
pub fn lease_key(prefix: &str, name: &str) -> String {
    format!("{prefix}{{{name}}}")
}

/// The fence counter for the name whose lease key is `lease`: one key on a
/// Redis server; on a Cluster one per hash slot, in the name's slot (so
/// that the grant scripts stay single-slot), never one per name.
/// The permits of a name (a semaphore's), beside its lease record `lease`.
pub(super) fn permits_key(lease: &str) -> String {
    format!("{lease}:permits")
}

fn fence_counter_key(prefix: &str, lease: &str, cluster: bool) -> String {
    if !cluster {
        return format!("{prefix}fences");
    }
    let tag = slot_tags()
        .get(&HashSlot::for_key(lease))
        .map_or("", String::as_str);
    format!("{prefix}{{{tag}}}:fences")
}

/// For each Cluster hash slot, a short hash tag that maps to it: the fence
/// counter of a slot is `{prefix}{tag}:fences`. Computed once (about 170,000
/// CRC16s of short strings, a few milliseconds), only for Cluster stores.
fn slot_tags() -> &'static HashMap<HashSlot, String> {
    static TAGS: OnceLock<HashMap<HashSlot, String>> = OnceLock::new();
    TAGS.get_or_init(|| {
        const SLOTS: usize = 16_384;
        let mut tags = HashMap::with_capacity(SLOTS);
        let mut n = 0u64;
        while tags.len() < SLOTS {
            let tag = format!("{n:x}");
            tags.entry(HashSlot::for_key(&tag)).or_insert(tag);
            n += 1;
        }
        tags
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_put_the_name_in_a_cluster_hash_tag() {
        assert_eq!(
            lease_key("leasehold:", "jobs/nightly"),
            "leasehold:{jobs/nightly}"
        );
        assert_eq!(lease_key("p:", "a/b"), "p:{a/b}");
    }

    /// On a Cluster each slot has its own fence counter, in that slot (so a
    /// grant script stays single-slot): 16,384 keys at most, whatever the
    /// number of names.
    #[test]
    fn every_slot_has_a_fence_counter_tag_in_that_slot() {
        let tags = slot_tags();
        assert_eq!(tags.len(), 16_384);
        for (slot, tag) in tags {
            assert_eq!(
                HashSlot::for_key(format!("leasehold:{{{tag}}}:fences")),
                *slot
            );
        }
        for name in ["a", "jobs/nightly", "t|x", "3f2"] {
            let keys = NameKeys::new("leasehold:", name, true);
            assert_eq!(
                HashSlot::for_key(&keys.fences),
                HashSlot::for_key(&keys.lease),
                "{name}"
            );
        }
        assert_eq!(
            NameKeys::new("leasehold:", "a", false).fences,
            "leasehold:fences"
        );
    }
}
