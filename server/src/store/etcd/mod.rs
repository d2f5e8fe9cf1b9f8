//! The etcd store (`etcd://host:2379[,host:2379...]`, `etcds://` for TLS):
//! leases on etcd 3.4+, a Raft store, where no asynchronous replica can
//! lose a grant and no broker clock decides an expiry.
//!
//! # How a lease maps onto etcd
//!
//! One etcd lease per grant (G), as etcd's own concurrency package holds a
//! lock: the name's key (`keys::NameKeys::lock`, or a permit's slot) is on
//! G, so it is gone when etcd's leader expires G; expiry is etcd's clock,
//! never the broker's. docs/design/etcd.md has the measurements this rests
//! on (a key holding its own expiry was 2x faster, but its expiry would be
//! the broker's wall clock). Beside G, a grant has a record lease R (TTL +
//! lock-delay + linger), so that the holder still hears "expired", once,
//! after G ended, and with a lock-delay, a delay lease D (TTL + lock-delay,
//! kept alive with G), whose key outlives G by the delay. A renewal keeps
//! G, R and D alive on the one LeaseKeepAlive stream: no Raft write. etcd
//! leases are whole seconds: a TTL is rounded up (a lease lives at least as
//! long as the broker says; never shorter), and etcd's leader revokes an
//! expired lease within about half a second.
//!
//! # Every operation: read the name, decide, commit if nothing changed
//!
//! Every key of a name lies under one prefix (`keys`), so an operation
//! reads what it needs of the name in one read-only transaction
//! (linearizable: served by the leader after a quorum read-index, no Raft
//! write), decides in Rust, and commits in one transaction whose compares
//! hold only if what it decided on is unchanged (each key's `mod_revision`,
//! or a range's every key). A commit that finds a change reads again (at
//! most [`TRIES`] times; past that, UNAVAILABLE: the name is too busy).
//!
//! # Fences
//!
//! A grant's fence is `base + create_revision` of its key: revisions are
//! global to the cluster and rise with every write, so fences rise per name
//! and across names. `base` is held in `{prefix}|epoch`, written once per
//! cluster as `max(broker floor + 1, broker wall clock in µs)` and compared
//! by every grant: an etcd that lost its data has no epoch, so the next
//! grant writes a new base above every fence issued before (revisions rise
//! by far less than one per µs: about 10^4 writes/s here, 10^6 headroom),
//! and above the broker's floor should its clock have stepped back. The
//! broker's clock is used for that base only, never for an expiry.
//!
//! # How it fails
//!
//! * etcd down or without a quorum: every call fails UNAVAILABLE within
//!   the store timeout; the watch stream reconnects and wakes every waiter
//!   (events may have been missed).
//! * A call cut at the store timeout after etcd applied it: a grant is the
//!   lease layer's orphan to release; a release, revoke or report applied
//!   late is what the caller asked for.
//! * A leader change: etcd gives every lease a full TTL again (etcd#9888),
//!   so a dead holder's lease can outlive its TTL (never end early); the
//!   README says so.
//! * etcd wiped: leases are gone (holders told at their next heartbeat as
//!   by a Redis that lost its data), fences keep rising (the epoch).

mod client;
mod keys;
pub(crate) use self::client::EtcdUrl;
mod subscribe;

use std::{
    collections::BTreeSet,
    sync::{Arc, Mutex, PoisonError, RwLock},
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use futures_util::future::join_all;
use tokio::sync::mpsc;

use self::{
    client::{
        api::{
            etcdserverpb::{
                compare::{CompareResult, CompareTarget, TargetUnion},
                range_request::{SortOrder, SortTarget},
                request_op::Request as Op,
                response_op::Response as Answer,
                Compare, DeleteRangeRequest, PutRequest, RangeRequest, RangeResponse, RequestOp,
                TxnRequest, TxnResponse,
            },
            mvccpb::KeyValue,
        },
        Client,
    },
    keys::{epoch_key, End, Holding, NameKeys, Record},
};
use super::{
    backend::Backend,
    contract::LINGER,
    one_answer_each,
    safety::{Finding, Setting},
    watch::Watchers,
    Acquired, Blocked, BlockedBy, Checked, Described, Event, GrantSpec, LeaseInfo, Listed, Listing,
    Ping, RenewItem, Renewed, Revocation, StoreOptions, Watch, QUEUE_LIFETIME,
};
use crate::{
    duration::millis,
    error::{Error, Result},
};

/// Most expired leases a grant reports: each adds a compare and two
/// operations to its transaction, and etcd refuses a transaction of more
/// than `--max-txn-ops` operations (128 by default); a semaphore of 100
/// permits that all expired would otherwise make every grant of the name
/// fail.
const REPORTED_PER_GRANT: usize = 32;

/// How many times an operation reads and commits before it gives up on a
/// name that keeps changing under it.
const TRIES: usize = 16;

/// How long one linger lease takes end records: a new one is granted when
/// the current one is older, so that a record lives LINGER to LINGER + this.
const LINGER_SLICE: Duration = Duration::from_secs(1);

/// The fence base and the revision that created it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Epoch {
    created: i64,
    base: u64,
}

struct Inner {
    client: Client,
    prefix: String,
    watchers: Watchers,
    /// The epoch last read (every read of a name reads it again: a wiped
    /// etcd is seen at the next operation).
    epoch: RwLock<Option<Epoch>>,
    /// The linger lease taking end records now, and when it was granted.
    /// A std lock: held for no await.
    linger: Mutex<Option<(i64, tokio::time::Instant)>>,
    /// Serializes the grant of a new linger lease (one per slice, not one
    /// per caller that found the last one old).
    linger_grant: tokio::sync::Mutex<()>,
}

/// The etcd store; cheap to clone.
#[derive(Clone)]
pub struct EtcdStore {
    inner: Arc<Inner>,
}

impl EtcdStore {
    /// Connects lazily to the etcd cluster of `url` (`etcd://`, `etcds://`):
    /// the broker starts, and reports NOT_SERVING, while etcd is down.
    pub fn open(url: &str, options: &StoreOptions) -> Result<Self> {
        let url = EtcdUrl::parse(url)?;
        let client = Client::open(&url, options)?;
        let (requests, requests_rx) = mpsc::unbounded_channel();
        let watchers = Watchers::new(Some(requests));
        tokio::spawn(subscribe::run(
            client.clone(),
            options.key_prefix.clone(),
            watchers.clone(),
            requests_rx,
        ));
        Ok(EtcdStore {
            inner: Arc::new(Inner {
                client,
                prefix: options.key_prefix.clone(),
                watchers,
                epoch: RwLock::new(None),
                linger: Mutex::new(None),
                linger_grant: tokio::sync::Mutex::new(()),
            }),
        })
    }

    fn client(&self) -> &Client {
        &self.inner.client
    }

    /// One transaction. A lease it names that etcd no longer has (only the
    /// linger lease is older than the call: etcd restarted without its
    /// data, or revoked it) fails the transaction whole: the linger lease
    /// is then forgotten, so that the caller's retry takes a new one.
    async fn txn(&self, op: &'static str, txn: TxnRequest) -> Result<TxnResponse> {
        match self.client().txn(op, txn).await {
            Err(Error::Internal(e)) if e.contains("requested lease not found") => {
                *self
                    .inner
                    .linger
                    .lock()
                    .unwrap_or_else(PoisonError::into_inner) = None;
                Err(Error::Unavailable(format!(
                    "{e} (a lease of this call ended in etcd meanwhile: try again)"
                )))
            }
            other => other,
        }
    }

    fn keys(&self, name: &str) -> NameKeys {
        NameKeys::new(&self.inner.prefix, name)
    }

    /// The epoch a read saw (`kv`: the epoch key, if any), remembered; or,
    /// when the read saw none, the last one known (0 before any).
    fn epoch_seen(&self, kv: Option<&KeyValue>) -> Option<Epoch> {
        let seen = kv.and_then(|kv| {
            Some(Epoch {
                created: kv.create_revision,
                base: std::str::from_utf8(&kv.value).ok()?.parse().ok()?,
            })
        });
        if let Some(epoch) = seen {
            *self
                .inner
                .epoch
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Some(epoch);
        }
        seen
    }

    /// The base of fences (0 before any epoch was seen).
    fn base(&self, kv: Option<&KeyValue>) -> u64 {
        self.epoch_seen(kv)
            .or_else(|| {
                *self
                    .inner
                    .epoch
                    .read()
                    .unwrap_or_else(PoisonError::into_inner)
            })
            .map_or(0, |e| e.base)
    }

    /// Writes the epoch if there is none (a new or wiped etcd), with a
    /// base above `floor` and the broker's clock in µs; the epoch there
    /// now.
    async fn make_epoch(&self, floor: u64) -> Result<Epoch> {
        let key = epoch_key(&self.inner.prefix);
        let base = floor.saturating_add(1).max(unix_micros());
        let answer = self
            .txn(
                "Txn (epoch)",
                TxnRequest {
                    compare: vec![absent(&key)],
                    success: vec![put(&key, base.to_string().into_bytes(), 0)],
                    failure: vec![get(&key)],
                },
            )
            .await?;
        if answer.succeeded {
            let epoch = Epoch {
                created: revision(&answer),
                base,
            };
            tracing::info!(
                base,
                "etcd store: no fence epoch found (a new or wiped etcd); wrote one"
            );
            *self
                .inner
                .epoch
                .write()
                .unwrap_or_else(PoisonError::into_inner) = Some(epoch);
            return Ok(epoch);
        }
        let answers = Answers::of(answer);
        self.epoch_seen(answers.one(0))
            .ok_or_else(|| Error::Internal("etcd's fence epoch is unreadable".into()))
    }

    /// Applies `success` if none of the keys `read` changed since they were
    /// read (each still there, at the same `mod_revision`): whether it did.
    async fn commit_unchanged(
        &self,
        op: &'static str,
        read: &[&KeyValue],
        success: Vec<RequestOp>,
    ) -> Result<bool> {
        let answer = self
            .txn(
                op,
                TxnRequest {
                    compare: read
                        .iter()
                        .map(|kv| unchanged(&kv.key, kv.mod_revision))
                        .collect(),
                    success,
                    failure: Vec::new(),
                },
            )
            .await?;
        Ok(answer.succeeded)
    }

    /// The linger lease for end records now (LINGER + one slice).
    async fn linger(&self) -> Result<i64> {
        let fresh = || {
            self.inner
                .linger
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .filter(|(_, at)| at.elapsed() < LINGER_SLICE)
                .map(|(id, _)| id)
        };
        if let Some(id) = fresh() {
            return Ok(id);
        }
        let _granting = self.inner.linger_grant.lock().await;
        if let Some(id) = fresh() {
            return Ok(id);
        }
        let id = self.client().grant(LINGER + LINGER_SLICE).await?;
        *self
            .inner
            .linger
            .lock()
            .unwrap_or_else(PoisonError::into_inner) = Some((id, tokio::time::Instant::now()));
        Ok(id)
    }

    /// One acquire attempt for a lock (`limit` None) or a permit.
    async fn acquire(&self, spec: &GrantSpec, floor: u64, limit: Option<u32>) -> Result<Acquired> {
        let mut leases = GrantLeases::default();
        let outcome = self.try_acquire(spec, floor, limit, &mut leases).await;
        // Leases granted for a commit that did not happen, or may yet (a
        // call cut at the store timeout): revoked, again and again while
        // etcd does not answer, so that a grant still on its way fails, or
        // ends at once if it applied.
        let ttl = Duration::from_millis(spec.ttl_ms);
        let delay = Duration::from_millis(spec.lock_delay_ms);
        for (id, lifetime) in [
            (leases.grant, ttl),
            (leases.record, ttl + delay + LINGER),
            (leases.delay, ttl + delay),
        ] {
            self.client().revoke_within(id, lifetime);
        }
        outcome
    }

    async fn try_acquire(
        &self,
        spec: &GrantSpec,
        floor: u64,
        limit: Option<u32>,
        leases: &mut GrantLeases,
    ) -> Result<Acquired> {
        let keys = self.keys(&spec.name);
        let epoch_key = epoch_key(&self.inner.prefix);
        for _ in 0..TRIES {
            let read = self
                .txn(
                    "Txn (acquire: read)",
                    read_only(vec![
                        get(&keys.lock()),
                        get(&keys.delay()),
                        get_range(keys.slots()),
                        get_range(keys.records()),
                        count(keys.places()),
                        RequestOp {
                            request: Some(Op::RequestRange(first_in_line(keys.places()))),
                        },
                        get(&keys.place(&spec.token)),
                        get(&epoch_key),
                    ]),
                )
                .await?;
            let answers = Answers::of(read);
            let (lock, delay) = (answers.one(0), answers.one(1));
            let (slots, records) = (answers.all(2), answers.all(3));
            let (line, first, mine) = (answers.count(4), answers.one(5), answers.one(6));
            let epoch = match self.epoch_seen(answers.one(7)) {
                Some(epoch) => epoch,
                None => self.make_epoch(floor).await?,
            };
            let holdings: Vec<(&KeyValue, Holding)> = slots
                .iter()
                .filter_map(|kv| Some((kv, Holding::decode(&kv.value)?)))
                .collect();
            let fence_of =
                |kv: &KeyValue| epoch.base.saturating_add(kv.create_revision.unsigned_abs());

            // Held as a lock.
            if let Some(kv) = lock {
                let held = Holding::decode(&kv.value).unwrap_or_else(Holding::unreadable);
                if limit.is_none() && held.token == spec.token {
                    return Ok(Acquired::Granted {
                        fence: fence_of(kv),
                        expired: 0,
                    });
                }
                let blocked = Blocked {
                    by: BlockedBy::Holder,
                    fence: fence_of(kv),
                    remaining_ms: held.ttl_ms.max(1),
                    holder: held.holder,
                    ..blocked(BlockedBy::Holder)
                };
                return self.wait(spec, &keys, mine, line, blocked).await;
            }
            if let Some(kv) = delay {
                let blocked = Blocked {
                    by: BlockedBy::LockDelay,
                    fence: fence_of(kv),
                    remaining_ms: delay_value(&kv.value).max(1),
                    ..blocked(BlockedBy::Holder)
                };
                return self.wait(spec, &keys, mine, line, blocked).await;
            }
            // Held as a semaphore.
            if let Some(limit) = limit {
                if let Some((kv, _)) = holdings.iter().find(|(_, h)| h.token == spec.token) {
                    return Ok(Acquired::Granted {
                        fence: fence_of(kv),
                        expired: 0,
                    });
                }
                if holdings.len() >= limit as usize {
                    let (kv, first) = holdings
                        .iter()
                        .min_by_key(|(kv, _)| kv.create_revision)
                        .map(|(kv, h)| (*kv, h))
                        .ok_or_else(|| Error::Internal("a full semaphore has no permit".into()))?;
                    let blocked = Blocked {
                        by: BlockedBy::Holder,
                        fence: fence_of(kv),
                        remaining_ms: first.ttl_ms.max(1),
                        ..blocked(BlockedBy::Holder)
                    };
                    return self.wait(spec, &keys, mine, line, blocked).await;
                }
            } else if let Some(first) = holdings.iter().map(|(_, h)| h.ttl_ms).min() {
                let blocked = Blocked {
                    by: BlockedBy::Holder,
                    remaining_ms: first.max(1),
                    holder: "(semaphore permits)".into(),
                    ..blocked(BlockedBy::Holder)
                };
                return self.wait(spec, &keys, mine, line, blocked).await;
            }
            // Free: the first in line, or nobody in line, takes it.
            if let Some(first) = first {
                if keys.token_of(&first.key) != Some(spec.token.as_str()) {
                    let blocked = Blocked {
                        by: BlockedBy::Queue,
                        remaining_ms: millis(QUEUE_LIFETIME),
                        ..blocked(BlockedBy::Holder)
                    };
                    return self.wait(spec, &keys, mine, line, blocked).await;
                }
            }
            // The records of leases that ended unreported: every one but
            // the live permits'.
            // At most REPORTED_PER_GRANT of them, so that the grant stays
            // within etcd's operations per transaction; the rest are
            // reported by their holders or by the grants that follow.
            let expired: Vec<&KeyValue> = records
                .iter()
                .filter(|kv| {
                    keys.token_of(&kv.key).is_some_and(|t| {
                        t != spec.token && !holdings.iter().any(|(_, h)| h.token == t)
                    })
                })
                .take(REPORTED_PER_GRANT)
                .collect();
            let slot = match limit {
                None => None,
                Some(limit) => Some(
                    (0..limit)
                        .find(|s| !slots.iter().any(|kv| kv.key == keys.slot(*s)))
                        .ok_or_else(|| {
                            Error::Internal("a semaphore with room has no free slot".into())
                        })?,
                ),
            };
            let key = slot.map_or_else(|| keys.lock(), |s| keys.slot(s));
            let lock_delay_ms = if slot.is_none() {
                spec.lock_delay_ms
            } else {
                0
            };
            leases
                .take(self.client(), spec.ttl_ms, lock_delay_ms)
                .await?;
            let linger = if expired.is_empty() {
                0
            } else {
                self.linger().await?
            };

            let mut compare = vec![
                epoch_is(&epoch_key, epoch),
                absent(&keys.lock()),
                absent(&keys.delay()),
            ];
            compare.push(match slot {
                None => none_in(keys.slots()),
                Some(_) => absent(&key),
            });
            compare.push(match mine {
                Some(place) => none_before(keys.places(), place.create_revision),
                None => none_in(keys.places()),
            });
            compare.extend(expired.iter().map(|kv| unchanged(&kv.key, kv.mod_revision)));
            let holding = Holding {
                token: spec.token.clone(),
                ttl_ms: spec.ttl_ms,
                lock_delay_ms,
                granted_at_unix_ms: unix_micros() / 1_000,
                holder: spec.holder.clone(),
            };
            let record = Record {
                slot,
                lease: leases.grant,
                delay_lease: leases.delay,
                ttl_ms: spec.ttl_ms,
                lock_delay_ms,
            };
            let mut success = vec![
                put(&key, holding.encode(), leases.grant),
                put(&keys.record(&spec.token), record.encode(), leases.record),
                delete(&keys.revoked()),
                // A token's end from an earlier lease (a caller that reuses
                // its token) would shadow this one's record.
                delete(&keys.end(&spec.token)),
            ];
            if leases.delay != 0 {
                success.push(put(
                    &keys.delay(),
                    delay_encode(lock_delay_ms),
                    leases.delay,
                ));
            }
            if mine.is_some() {
                success.push(delete(&keys.place(&spec.token)));
            }
            for kv in &expired {
                success.push(delete(&kv.key));
                if let Some(token) = keys.token_of(&kv.key) {
                    success.push(put(&keys.end(token), End::ExpiredReported.encode(), linger));
                }
            }
            let answer = self
                .txn(
                    "Txn (acquire: grant)",
                    TxnRequest {
                        compare,
                        success,
                        failure: Vec::new(),
                    },
                )
                .await?;
            if answer.succeeded {
                let fence = epoch.base.saturating_add(revision(&answer).unsigned_abs());
                *leases = GrantLeases::default();
                return Ok(Acquired::Granted {
                    fence,
                    expired: u32::try_from(expired.len()).unwrap_or(u32::MAX),
                });
            }
        }
        Err(busy(&spec.name))
    }

    /// A blocked attempt: the caller who waits takes (or keeps) its place
    /// in line, and is told where it stands.
    async fn wait(
        &self,
        spec: &GrantSpec,
        keys: &NameKeys,
        mine: Option<&KeyValue>,
        line: u64,
        blocked: Blocked,
    ) -> Result<Acquired> {
        if !spec.queued {
            return Ok(Acquired::Blocked(Blocked {
                queued: line,
                ..blocked
            }));
        }
        let (position, queued) = match mine {
            Some(place) => {
                // Coming back keeps one's place, and renews it.
                let (renewed, ahead) = tokio::join!(
                    self.client().keep_alive(place.lease),
                    self.txn(
                        "Txn (acquire: place)",
                        // etcd counts before it filters by revision: the
                        // keys themselves are counted here.
                        read_only(vec![RequestOp {
                            request: Some(Op::RequestRange(RangeRequest {
                                max_create_revision: place.create_revision - 1,
                                keys_only: true,
                                ..range_of(keys.places())
                            })),
                        }]),
                    )
                );
                let _ = renewed?;
                (Answers::of(ahead?).all(0).len() as u64 + 1, line)
            }
            None => {
                let lease = self.client().grant(QUEUE_LIFETIME).await?;
                let place = keys.place(&spec.token);
                let answer = self
                    .txn(
                        "Txn (acquire: join the line)",
                        TxnRequest {
                            compare: vec![absent(&place)],
                            success: vec![put(&place, Vec::new(), lease), count(keys.places())],
                            failure: vec![count(keys.places())],
                        },
                    )
                    .await?;
                if !answer.succeeded {
                    self.client().revoke_later(lease);
                }
                let total = Answers::of(answer).count_at_end();
                (total, total)
            }
        };
        Ok(Acquired::Blocked(Blocked {
            position,
            queued,
            ..blocked
        }))
    }

    /// What a token's lease is, as one read of the name shows it.
    async fn look(&self, name: &str, token: &str) -> Result<(Lease, NameKeys)> {
        let keys = self.keys(name);
        let mut ops = look_ops(&keys, token).to_vec();
        ops.push(get(&epoch_key(&self.inner.prefix)));
        let read = self.txn("Txn (lease: read)", read_only(ops)).await?;
        let answers = Answers::of(read);
        let base = self.base(answers.one(LOOK_OPS));
        let lease = lease_in(&answers, 0, &keys, name, token, base)?;
        Ok((lease, keys))
    }

    /// [`EtcdStore::look`] for every item of a heartbeat, in one read
    /// transaction per [`LOOKS_PER_TXN`] items, all at once.
    async fn look_many(&self, items: &[RenewItem]) -> Result<Vec<(Lease, NameKeys)>> {
        let epoch = epoch_key(&self.inner.prefix);
        let reads = join_all(items.chunks(LOOKS_PER_TXN).map(|chunk| {
            let keys: Vec<NameKeys> = chunk.iter().map(|item| self.keys(&item.name)).collect();
            let mut ops: Vec<RequestOp> = keys
                .iter()
                .zip(chunk)
                .flat_map(|(keys, item)| look_ops(keys, &item.token))
                .collect();
            ops.push(get(&epoch));
            async move {
                let read = self.txn("Txn (heartbeat: read)", read_only(ops)).await?;
                let answers = Answers::of(read);
                let base = self.base(answers.one(chunk.len() * LOOK_OPS));
                keys.into_iter()
                    .zip(chunk)
                    .enumerate()
                    .map(|(i, (keys, item))| {
                        let lease =
                            lease_in(&answers, i * LOOK_OPS, &keys, &item.name, &item.token, base)?;
                        Ok((lease, keys))
                    })
                    .collect::<Result<Vec<_>>>()
            }
        }))
        .await;
        let mut leases = Vec::with_capacity(items.len());
        for read in reads {
            leases.extend(read?);
        }
        Ok(leases)
    }

    /// What [`describe_ops`]' answers from `at` on say of a name, with the
    /// time left of its lease or lock-delay (one LeaseTimeToLive, when it
    /// has either: etcd's leader knows it, no key holds it); and the last
    /// fence it read (0 if none).
    async fn described_in(
        &self,
        answers: &Answers,
        at: usize,
        base: u64,
    ) -> Result<(Described, u64)> {
        let mut described = Described {
            waiters: answers.count(at + 2),
            permits: answers.count(at + 3),
            ..Described::default()
        };
        let mut fence = 0;
        if let Some(lock) = answers.one(at) {
            let held = Holding::decode(&lock.value).unwrap_or_else(Holding::unreadable);
            fence = base.saturating_add(lock.create_revision.unsigned_abs());
            if let Some(left) = self.client().time_to_live(lock.lease).await? {
                described.lease = Some(LeaseInfo {
                    holder: held.holder,
                    fence,
                    // etcd truncates to whole seconds: an under-estimate.
                    remaining_ms: left.saturating_mul(1_000).clamp(1, held.ttl_ms),
                    ttl_ms: held.ttl_ms,
                    granted_at_unix_ms: held.granted_at_unix_ms,
                    lock_delay_ms: held.lock_delay_ms,
                });
            }
        } else if let Some(delay) = answers.one(at + 1) {
            let delay_ms = delay_value(&delay.value);
            fence = base.saturating_add(delay.create_revision.unsigned_abs());
            if let Some(left) = self.client().time_to_live(delay.lease).await? {
                described.lock_delay_remaining_ms =
                    left.saturating_mul(1_000).clamp(1, delay_ms.max(1));
            }
        }
        Ok((described, fence))
    }

    /// [`Backend::describe`] of every name, in order: one read transaction
    /// per [`DESCRIBES_PER_TXN`] names, then their LeaseTimeToLive calls,
    /// all at once (as [`EtcdStore::look_many`] reads a heartbeat).
    async fn describe_many(&self, names: &[String]) -> Result<Vec<(Described, u64)>> {
        let epoch = epoch_key(&self.inner.prefix);
        let reads = join_all(names.chunks(DESCRIBES_PER_TXN).map(|chunk| {
            let mut ops: Vec<RequestOp> = chunk
                .iter()
                .flat_map(|name| describe_ops(&self.keys(name)))
                .collect();
            ops.push(get(&epoch));
            async move {
                let read = self.txn("Txn (list: describe)", read_only(ops)).await?;
                let answers = Answers::of(read);
                let base = self.base(answers.one(chunk.len() * DESCRIBE_OPS));
                join_all(
                    (0..chunk.len()).map(|i| self.described_in(&answers, i * DESCRIBE_OPS, base)),
                )
                .await
                .into_iter()
                .collect::<Result<Vec<_>>>()
            }
        }))
        .await;
        let mut described = Vec::with_capacity(names.len());
        for read in reads {
            described.extend(read?);
        }
        one_answer_each(described.len(), names.len(), "descriptions", "names")?;
        Ok(described)
    }

    /// Renews a lease a read found live with its own TTL: a keep-alive of
    /// each of its etcd leases, at once. `None` if it expired meanwhile.
    async fn keep(
        &self,
        record_kv: &KeyValue,
        record: Record,
        fence: u64,
    ) -> Result<Option<Renewed>> {
        let (grant, _, _) = tokio::join!(
            self.client().keep_alive(record.lease),
            self.keep_alive_opt(record_kv.lease),
            self.keep_alive_opt(record.delay_lease),
        );
        Ok((grant? > 0).then_some(Renewed {
            ttl_ms: record.ttl_ms,
            fence,
        }))
    }

    /// Records an expiry nobody reported yet: `Some(Expired)` if this call
    /// reported it, `None` if something changed first (look again).
    async fn report_expiry<T>(
        &self,
        keys: &NameKeys,
        token: &str,
        record_kv: &KeyValue,
    ) -> Result<Option<Checked<T>>> {
        let linger = self.linger().await?;
        let reported = self
            .commit_unchanged(
                "Txn (report an expiry)",
                &[record_kv],
                vec![
                    delete(&record_kv.key),
                    put(&keys.end(token), End::ExpiredReported.encode(), linger),
                ],
            )
            .await?;
        if reported {
            // Its leases hold no more keys but the delay's, which must
            // outlive them by the delay.
            if let Some(record) = Record::decode(&record_kv.value) {
                self.client().revoke_later(record_kv.lease);
                self.client().revoke_later(record.lease);
            }
        }
        Ok(reported.then_some(Checked::Expired))
    }

    /// Renews (`ttl` Some) or looks at (`ttl` None) a token's lease;
    /// `Some(None)` keeps its own TTL.
    async fn renew_or_look(
        &self,
        name: &str,
        token: &str,
        ttl: Option<Option<u64>>,
    ) -> Result<Checked<Renewed>> {
        for _ in 0..TRIES {
            let (lease, keys) = self.look(name, token).await?;
            match lease {
                Lease::Live {
                    holding,
                    record_kv,
                    record,
                    fence,
                } => {
                    let Some(ttl) = ttl else {
                        return Ok(Checked::Done(Renewed {
                            ttl_ms: record.ttl_ms,
                            fence,
                        }));
                    };
                    match ttl {
                        Some(ttl_ms) if ttl_ms != record.ttl_ms => {
                            if self
                                .retime(&keys, &holding, &record_kv, record, ttl_ms)
                                .await?
                            {
                                return Ok(Checked::Done(Renewed { ttl_ms, fence }));
                            }
                        }
                        _ => {
                            if let Some(renewed) = self.keep(&record_kv, record, fence).await? {
                                return Ok(Checked::Done(renewed));
                            }
                            // Expired: look again (its key goes with it).
                        }
                    }
                }
                Lease::Expired { record_kv } => {
                    if let Some(expired) = self.report_expiry(&keys, token, &record_kv).await? {
                        return Ok(expired);
                    }
                }
                other => return Ok(other.outcome()),
            }
        }
        Err(busy(name))
    }

    async fn keep_alive_opt(&self, id: i64) -> Result<i64> {
        if id == 0 {
            return Ok(0);
        }
        self.client().keep_alive(id).await
    }

    /// A renewal with a new TTL: an etcd lease's TTL cannot change, so the
    /// lease moves to new etcd leases (its fence, the key's
    /// `create_revision`, stays). `false` if the lease changed first.
    async fn retime(
        &self,
        keys: &NameKeys,
        holding: &KeyValue,
        record_kv: &KeyValue,
        record: Record,
        ttl_ms: u64,
    ) -> Result<bool> {
        let mut leases = GrantLeases::default();
        leases
            .take(self.client(), ttl_ms, record.lock_delay_ms)
            .await?;
        let mut held = Holding::decode(&holding.value)
            .ok_or_else(|| Error::Internal("etcd: a lease's value is unreadable".into()))?;
        held.ttl_ms = ttl_ms;
        let record_now = Record {
            lease: leases.grant,
            delay_lease: leases.delay,
            ttl_ms,
            ..record
        };
        let mut success = vec![
            put(&holding.key, held.encode(), leases.grant),
            put(&record_kv.key, record_now.encode(), leases.record),
        ];
        if leases.delay != 0 {
            success.push(put(
                &keys.delay(),
                delay_encode(record.lock_delay_ms),
                leases.delay,
            ));
        }
        let moved = self
            .commit_unchanged("Txn (renew with a new TTL)", &[holding, record_kv], success)
            .await?;
        let old = if moved {
            [record.lease, record_kv.lease, record.delay_lease]
        } else {
            [leases.grant, leases.record, leases.delay]
        };
        for id in old {
            self.client().revoke_later(id);
        }
        Ok(moved)
    }
}

/// The reads of [`describe_ops`] per name.
const DESCRIBE_OPS: usize = 4;

/// Names a listing describes in one read transaction: [`DESCRIBE_OPS`] per
/// name and the epoch, within etcd's `--max-txn-ops` (128 by default).
const DESCRIBES_PER_TXN: usize = 31;

/// The reads that tell what is on a name (describe's): its lock, its
/// lock-delay, how many places its line has, how many permits are held.
fn describe_ops(keys: &NameKeys) -> [RequestOp; DESCRIBE_OPS] {
    [
        get(&keys.lock()),
        get(&keys.delay()),
        count(keys.places()),
        count(keys.slots()),
    ]
}

/// [`keys::walked_to`], or the error of a key under the prefix that no
/// walk can move past.
fn walked_to(prefix: &str, key: &[u8]) -> Result<String> {
    keys::walked_to(prefix, key).ok_or_else(|| {
        let text = if std::str::from_utf8(key).is_ok() {
            "text"
        } else {
            "not text"
        };
        Error::Internal(format!(
            "etcd: the listing cannot walk past a key under the prefix '{prefix}' that is no \
             name's ({} bytes, {text}): was it written by something other than the broker?",
            key.len()
        ))
    })
}

/// The reads of [`look_ops`] per lease.
const LOOK_OPS: usize = 4;

/// Leases read in one heartbeat transaction: etcd refuses a transaction of
/// more than `--max-txn-ops` operations (128 by default), and a heartbeat
/// reads [`LOOK_OPS`] per lease plus the epoch.
const LOOKS_PER_TXN: usize = 31;

/// The reads that tell what a token's lease of a name is.
fn look_ops(keys: &NameKeys, token: &str) -> [RequestOp; LOOK_OPS] {
    [
        get(&keys.lock()),
        get(&keys.record(token)),
        get(&keys.end(token)),
        get_range(keys.slots()),
    ]
}

/// What [`look_ops`]' answers from `at` on say of `token`'s lease.
fn lease_in(
    answers: &Answers,
    at: usize,
    keys: &NameKeys,
    name: &str,
    token: &str,
    base: u64,
) -> Result<Lease> {
    let fence_of = |kv: &KeyValue| base.saturating_add(kv.create_revision.unsigned_abs());
    let lock = answers.one(at);
    if let Some(record_kv) = answers.one(at + 1) {
        let record = Record::decode(&record_kv.value).ok_or_else(|| {
            Error::Internal(format!(
                "etcd: the record of a lease of '{name}' is unreadable"
            ))
        })?;
        let holding = match record.slot {
            None => lock,
            Some(slot) => answers
                .all(at + 3)
                .iter()
                .find(|kv| kv.key == keys.slot(slot)),
        };
        let live =
            holding.filter(|kv| Holding::decode(&kv.value).is_some_and(|h| h.token == token));
        return Ok(match live {
            Some(kv) => Lease::Live {
                holding: kv.clone(),
                record_kv: record_kv.clone(),
                record,
                fence: fence_of(kv),
            },
            None => Lease::Expired {
                record_kv: record_kv.clone(),
            },
        });
    }
    if let Some(end) = answers.one(at + 2).and_then(|kv| End::decode(&kv.value)) {
        return Ok(Lease::Ended(end));
    }
    Ok(match lock {
        Some(kv) => Lease::Stranger {
            fence: fence_of(kv),
        },
        None => Lease::Unknown,
    })
}

/// A token's lease as one read shows it.
enum Lease {
    /// Its key is there with its token.
    Live {
        holding: KeyValue,
        record_kv: KeyValue,
        record: Record,
        fence: u64,
    },
    /// Its record is there, its key gone: it expired, unreported.
    Expired { record_kv: KeyValue },
    /// It ended, and how is recorded.
    Ended(End),
    /// No record of it; another token holds the name.
    Stranger { fence: u64 },
    /// No record of it, and the name is not held as a lock.
    Unknown,
}

impl Lease {
    /// The outcome of a lease that is not live.
    fn outcome<T>(self) -> Checked<T> {
        match self {
            Lease::Ended(End::Released) => Checked::Released,
            Lease::Ended(End::Revoked { fence }) => Checked::Revoked { fence },
            Lease::Ended(End::ExpiredReported) => Checked::ExpiredReported,
            Lease::Stranger { fence } => Checked::NotOwner { fence },
            Lease::Unknown | Lease::Live { .. } | Lease::Expired { .. } => Checked::NotHeld,
        }
    }
}

/// The etcd leases of one grant: G, R and (with a lock-delay) D; 0 for
/// one not granted.
#[derive(Default)]
struct GrantLeases {
    grant: i64,
    record: i64,
    delay: i64,
}

impl GrantLeases {
    /// Grants those not granted yet, at once (one round trip).
    async fn take(&mut self, client: &Client, ttl_ms: u64, lock_delay_ms: u64) -> Result<()> {
        let ttl = Duration::from_millis(ttl_ms);
        let delay = Duration::from_millis(lock_delay_ms);
        let want = |have: i64, ttl: Duration| async move {
            if have == 0 {
                client.grant(ttl).await
            } else {
                Ok(have)
            }
        };
        let (grant, record, delay) = tokio::join!(
            want(self.grant, ttl),
            want(self.record, ttl + delay + LINGER),
            async {
                if lock_delay_ms == 0 {
                    Ok(0)
                } else {
                    want(self.delay, ttl + delay).await
                }
            }
        );
        // Each one granted is kept, even when another failed: the caller
        // revokes what it does not use.
        if let Ok(id) = grant {
            self.grant = id;
        }
        if let Ok(id) = record {
            self.record = id;
        }
        if let Ok(id) = delay {
            self.delay = id;
        }
        grant?;
        record?;
        delay?;
        Ok(())
    }
}

/// A refusal `by`, its other fields to be set.
fn blocked(by: BlockedBy) -> Blocked {
    Blocked {
        by,
        fence: 0,
        remaining_ms: 1,
        holder: String::new(),
        position: 0,
        queued: 0,
        expired: 0,
    }
}

/// The lock-delay key's value: the delay. The key is written by the grant
/// (on D) and kept by a revoke (moved to a lease of the delay), so its
/// `create_revision` is the grant's: the lost lease's fence.
fn delay_encode(delay_ms: u64) -> Vec<u8> {
    delay_ms.to_string().into_bytes()
}

fn delay_value(value: &[u8]) -> u64 {
    std::str::from_utf8(value)
        .ok()
        .and_then(|d| d.parse().ok())
        .unwrap_or(0)
}

/// Whether etcd `version` has etcd#15247 (a deposed leader still
/// revoking leases): fixed in 3.4.31 and 3.5.13 (and every 3.6).
fn revokes_early(version: &str) -> bool {
    let mut parts = version
        .split(['.', '-', '+'])
        .map(|p| p.parse::<u64>().ok());
    match (
        parts.next().flatten(),
        parts.next().flatten(),
        parts.next().flatten(),
    ) {
        (Some(3), Some(minor), Some(patch)) => match minor {
            0..=3 => true,
            4 => patch < 31,
            5 => patch < 13,
            _ => false,
        },
        (Some(major), _, _) => major < 3,
        // A version etcd did not say: nothing known to be unsafe.
        (None, _, _) => false,
    }
}

fn busy(name: &str) -> Error {
    Error::Unavailable(format!(
        "the lease '{name}' changed in etcd under each of {TRIES} attempts; try again"
    ))
}

fn unix_micros() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
}

/// The revision a transaction's answer was made at (its writes' revision).
fn revision(answer: &TxnResponse) -> i64 {
    answer.header.as_ref().map_or(0, |h| h.revision)
}

/// The answers of a transaction's operations, by position.
struct Answers(Vec<Option<Answer>>);

impl Answers {
    fn of(answer: TxnResponse) -> Answers {
        Answers(answer.responses.into_iter().map(|r| r.response).collect())
    }

    fn range(&self, at: usize) -> Option<&RangeResponse> {
        match self.0.get(at)? {
            Some(Answer::ResponseRange(range)) => Some(range),
            _ => None,
        }
    }

    /// The one key a get found.
    fn one(&self, at: usize) -> Option<&KeyValue> {
        self.range(at)?.kvs.first()
    }

    /// Every key a range read found.
    fn all(&self, at: usize) -> &[KeyValue] {
        self.range(at).map_or(&[], |r| r.kvs.as_slice())
    }

    /// How many keys a count found.
    fn count(&self, at: usize) -> u64 {
        self.range(at).map_or(0, |r| r.count.unsigned_abs())
    }

    /// The count of the last operation.
    fn count_at_end(&self) -> u64 {
        self.0
            .len()
            .checked_sub(1)
            .map_or(0, |last| self.count(last))
    }
}

fn range_of((key, range_end): (Vec<u8>, Vec<u8>)) -> RangeRequest {
    RangeRequest {
        key,
        range_end,
        ..RangeRequest::default()
    }
}

fn get(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(RangeRequest {
            key: key.to_vec(),
            ..RangeRequest::default()
        })),
    }
}

fn get_range(range: (Vec<u8>, Vec<u8>)) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(range_of(range))),
    }
}

fn count(range: (Vec<u8>, Vec<u8>)) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestRange(RangeRequest {
            count_only: true,
            ..range_of(range)
        })),
    }
}

/// The places of a line (`NameKeys::places`) in arrival order (their
/// creation revisions), keys only.
fn line_in_order(places: (Vec<u8>, Vec<u8>)) -> RangeRequest {
    RangeRequest {
        sort_order: SortOrder::Ascend.into(),
        sort_target: SortTarget::Create.into(),
        keys_only: true,
        ..range_of(places)
    }
}

/// The oldest place of a line.
pub(super) fn first_in_line(places: (Vec<u8>, Vec<u8>)) -> RangeRequest {
    RangeRequest {
        limit: 1,
        ..line_in_order(places)
    }
}

fn put(key: &[u8], value: Vec<u8>, lease: i64) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestPut(PutRequest {
            key: key.to_vec(),
            value,
            lease,
            ..PutRequest::default()
        })),
    }
}

fn delete(key: &[u8]) -> RequestOp {
    RequestOp {
        request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
            key: key.to_vec(),
            ..DeleteRangeRequest::default()
        })),
    }
}

/// A transaction of reads only: etcd serves it as a linearizable read,
/// with no Raft write.
fn read_only(ops: Vec<RequestOp>) -> TxnRequest {
    unconditional(ops)
}

/// A transaction without compares.
fn unconditional(ops: Vec<RequestOp>) -> TxnRequest {
    TxnRequest {
        compare: Vec::new(),
        success: ops,
        failure: Vec::new(),
    }
}

fn compare(
    key: &[u8],
    range_end: Vec<u8>,
    target: CompareTarget,
    result: CompareResult,
    value: TargetUnion,
) -> Compare {
    Compare {
        result: result.into(),
        target: target.into(),
        key: key.to_vec(),
        range_end,
        target_union: Some(value),
    }
}

/// The key does not exist.
fn absent(key: &[u8]) -> Compare {
    compare(
        key,
        Vec::new(),
        CompareTarget::Create,
        CompareResult::Equal,
        TargetUnion::CreateRevision(0),
    )
}

/// The key was created at `revision`.
/// The fence epoch is still `epoch`: its base, not only its revision,
/// which a wiped etcd starts again from 1 (the epoch, its first write, is
/// then created at the same revision as before, with another base).
fn epoch_is(key: &[u8], epoch: Epoch) -> Compare {
    compare(
        key,
        Vec::new(),
        CompareTarget::Value,
        CompareResult::Equal,
        TargetUnion::Value(epoch.base.to_string().into_bytes()),
    )
}

/// The key exists, last changed at `revision`.
fn unchanged(key: &[u8], revision: i64) -> Compare {
    compare(
        key,
        Vec::new(),
        CompareTarget::Mod,
        CompareResult::Equal,
        TargetUnion::ModRevision(revision),
    )
}

/// No key in the range (an empty range compares as one key of version 0).
fn none_in((key, end): (Vec<u8>, Vec<u8>)) -> Compare {
    compare(
        &key,
        end,
        CompareTarget::Version,
        CompareResult::Equal,
        TargetUnion::Version(0),
    )
}

/// Every key in the range was created at `revision` or later.
fn none_before((key, end): (Vec<u8>, Vec<u8>), revision: i64) -> Compare {
    compare(
        &key,
        end,
        CompareTarget::Create,
        CompareResult::Greater,
        TargetUnion::CreateRevision(revision - 1),
    )
}

impl Backend for EtcdStore {
    async fn acquire_lock(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        self.acquire(spec, floor, None).await
    }

    async fn acquire_permit(&self, spec: &GrantSpec, floor: u64) -> Result<Acquired> {
        self.acquire(spec, floor, Some(spec.limit)).await
    }

    async fn renew(
        &self,
        name: &str,
        token: &str,
        ttl_ms: Option<u64>,
    ) -> Result<Checked<Renewed>> {
        self.renew_or_look(name, token, Some(ttl_ms)).await
    }

    /// A whole heartbeat in two round trips: one read of every lease (a
    /// read transaction per 31 leases, all at once), then the keep-alive
    /// messages of every live lease, back to back on the one stream. A
    /// lease that is not simply live with its own TTL (a new TTL, an expiry
    /// to report) takes [`Backend::renew`]'s path.
    async fn renew_many(&self, items: &[RenewItem]) -> Result<Vec<Checked<Renewed>>> {
        let leases = self.look_many(items).await?;
        join_all(
            items
                .iter()
                .zip(leases)
                .map(|(item, (lease, _))| async move {
                    if let Lease::Live {
                        record_kv,
                        record,
                        fence,
                        ..
                    } = &lease
                    {
                        if item.ttl_ms.is_none_or(|ttl| ttl == record.ttl_ms) {
                            if let Some(renewed) = self.keep(record_kv, *record, *fence).await? {
                                return Ok(Checked::Done(renewed));
                            }
                        }
                    }
                    if let Lease::Ended(_) | Lease::Stranger { .. } | Lease::Unknown = lease {
                        return Ok(lease.outcome());
                    }
                    self.renew_or_look(&item.name, &item.token, Some(item.ttl_ms))
                        .await
                }),
        )
        .await
        .into_iter()
        .collect()
    }

    async fn check(&self, name: &str, token: &str) -> Result<Checked<Renewed>> {
        self.renew_or_look(name, token, None).await
    }

    async fn release(&self, name: &str, token: &str) -> Result<Checked<()>> {
        for _ in 0..TRIES {
            let (lease, keys) = self.look(name, token).await?;
            match lease {
                Lease::Live {
                    holding,
                    record_kv,
                    record,
                    ..
                } => {
                    let linger = self.linger().await?;
                    let mut success = vec![
                        delete(&holding.key),
                        delete(&record_kv.key),
                        put(&keys.end(token), End::Released.encode(), linger),
                    ];
                    if record.slot.is_none() {
                        // Voluntary: no lock-delay, and no revocation to
                        // repeat.
                        success.push(delete(&keys.delay()));
                        success.push(delete(&keys.revoked()));
                    }
                    if self
                        .commit_unchanged("Txn (release)", &[&holding, &record_kv], success)
                        .await?
                    {
                        for id in [record.lease, record_kv.lease, record.delay_lease] {
                            self.client().revoke_later(id);
                        }
                        return Ok(Checked::Done(()));
                    }
                }
                Lease::Expired { record_kv } => {
                    if let Some(expired) = self.report_expiry(&keys, token, &record_kv).await? {
                        return Ok(expired);
                    }
                }
                other => return Ok(other.outcome()),
            }
        }
        Err(busy(name))
    }

    async fn revoke(&self, name: &str) -> Result<Revocation> {
        let keys = self.keys(name);
        for _ in 0..TRIES {
            let read = self
                .txn(
                    "Txn (revoke: read)",
                    read_only(vec![
                        get(&keys.lock()),
                        get(&keys.revoked()),
                        get(&epoch_key(&self.inner.prefix)),
                    ]),
                )
                .await?;
            let answers = Answers::of(read);
            let base = self.base(answers.one(2));
            let Some(lock) = answers.one(0).cloned() else {
                return Ok(match answers.one(1) {
                    Some(kv) => Revocation::Already {
                        fence: std::str::from_utf8(&kv.value)
                            .ok()
                            .and_then(|f| f.parse().ok())
                            .unwrap_or(0),
                    },
                    None => Revocation::NotHeld,
                });
            };
            let fence = base.saturating_add(lock.create_revision.unsigned_abs());
            let held = Holding::decode(&lock.value).unwrap_or_else(Holding::unreadable);
            let record_key = keys.record(&held.token);
            let linger = self.linger().await?;
            let delay = if held.lock_delay_ms > 0 {
                self.client()
                    .grant(Duration::from_millis(held.lock_delay_ms))
                    .await?
            } else {
                0
            };
            let mut success = vec![
                delete(&lock.key),
                delete(&record_key),
                put(
                    &keys.end(&held.token),
                    End::Revoked { fence }.encode(),
                    linger,
                ),
                put(&keys.revoked(), fence.to_string().into_bytes(), linger),
            ];
            success.push(if delay != 0 {
                put(&keys.delay(), delay_encode(held.lock_delay_ms), delay)
            } else {
                delete(&keys.delay())
            });
            if self
                .commit_unchanged("Txn (revoke)", &[&lock], success)
                .await?
            {
                self.client().revoke_later(lock.lease);
                // The record's and the old delay's leases go with their
                // own TTLs (their keys were replaced or deleted above).
                return Ok(Revocation::Revoked { fence });
            }
            self.client().revoke_later(delay);
        }
        Err(busy(name))
    }

    /// Range reads of the keys under the prefix from the resume point
    /// (keys only, at most `budget` keys in all, each a name's or none: a
    /// name has several), in intervals that widen until the page is full
    /// ([`keys::Probes`]: etcd counts every key of a Range's interval),
    /// then the names they belong to described, [`DESCRIBES_PER_TXN`] per
    /// read transaction, all at once, with one LeaseTimeToLive per name
    /// that has a lock or a lock-delay. The walk is in key order, which is not name
    /// order (`a/1`'s keys sort before `a`'s: `/` is below `|`): each page
    /// is sorted, and the next starts after the last key read
    /// ([`keys::walked_to`]: after all of its name's keys, but for a root
    /// name whose keys nest a tenant's). A name whose keys span two pages
    /// may be listed on both.
    async fn list(
        &self,
        prefix: &str,
        resume: Option<&str>,
        budget: usize,
    ) -> Result<(Listing, u64)> {
        let root = &self.inner.prefix;
        let (mut start, end) = keys::names_from(root, prefix);
        if let Some(token) = resume {
            let after = keys::resume_at(root, token).ok_or_else(super::bad_token)?;
            start = start.max(after);
        }
        if start.is_empty() {
            // etcd reads an empty key as none given: from the first key.
            start = vec![0];
        }
        if end != [0] && start >= end {
            return Ok((Listing::default(), 0));
        }
        let floor = self.inner.prefix.len() + prefix.len();
        let mut probes = keys::Probes::new(start, end, floor);
        let (mut read, mut more) = (Vec::new(), false);
        while let Some((from, to, last)) = probes.next() {
            let left = budget.saturating_sub(read.len()).max(1);
            let page = self
                .client()
                .range(
                    "Range (list)",
                    RangeRequest {
                        key: from,
                        range_end: to,
                        limit: i64::try_from(left).unwrap_or(i64::MAX),
                        keys_only: true,
                        ..RangeRequest::default()
                    },
                )
                .await?;
            read.extend(page.kvs);
            if page.more || (read.len() >= budget && !last) {
                more = true;
                break;
            }
            if read.len() >= budget {
                break;
            }
        }
        let names: BTreeSet<String> = read
            .iter()
            .filter_map(|kv| keys::name_of(root, &kv.key))
            .filter(|name| name.starts_with(prefix))
            .map(str::to_owned)
            .collect();
        let next = match read.last() {
            Some(last) if more => Some(walked_to(root, &last.key)?),
            _ => None,
        };
        let names: Vec<String> = names.into_iter().collect();
        let described = self.describe_many(&names).await?;
        let mut listing = Listing {
            entries: Vec::new(),
            next,
        };
        let mut highest = 0;
        for (name, (described, fence)) in names.into_iter().zip(described) {
            highest = highest.max(fence);
            if !described.is_idle() {
                listing.entries.push(Listed { name, described });
            }
        }
        Ok((listing, highest))
    }

    async fn describe(&self, name: &str) -> Result<(Described, u64)> {
        let keys = self.keys(name);
        let mut ops = describe_ops(&keys).to_vec();
        ops.push(get(&epoch_key(&self.inner.prefix)));
        let read = self.txn("Txn (describe)", read_only(ops)).await?;
        let answers = Answers::of(read);
        let base = self.base(answers.one(DESCRIBE_OPS));
        self.described_in(&answers, 0, base).await
    }

    async fn dequeue(&self, name: &str, token: &str) -> Result<()> {
        let keys = self.keys(name);
        let answer = self
            .txn(
                "Txn (dequeue)",
                unconditional(vec![RequestOp {
                    request: Some(Op::RequestDeleteRange(DeleteRangeRequest {
                        key: keys.place(token),
                        prev_kv: true,
                        ..DeleteRangeRequest::default()
                    })),
                }]),
            )
            .await?;
        for response in answer.responses {
            if let Some(Answer::ResponseDeleteRange(deleted)) = response.response {
                for kv in deleted.prev_kvs {
                    self.client().revoke_later(kv.lease);
                }
            }
        }
        Ok(())
    }

    async fn refresh_places(&self, name: &str, tokens: &[String]) -> Result<Vec<Option<u64>>> {
        let keys = self.keys(name);
        let line = self
            .client()
            .range("Range (refresh places)", line_in_order(keys.places()))
            .await?;
        let ranks: std::collections::HashMap<&str, (u64, i64)> = line
            .kvs
            .iter()
            .enumerate()
            .filter_map(|(rank, kv)| Some((keys.token_of(&kv.key)?, (rank as u64, kv.lease))))
            .collect();
        let renewed = join_all(tokens.iter().map(|token| async {
            match ranks.get(token.as_str()) {
                Some(&(rank, lease)) => {
                    Ok((self.client().keep_alive(lease).await? > 0).then_some(rank))
                }
                None => Ok(None),
            }
        }))
        .await;
        renewed.into_iter().collect()
    }

    /// The leader revokes an expired lease within about half a second (its
    /// lessor looks for expired leases every 500 ms); twice that, for a
    /// loaded leader.
    fn expiry_lag(&self) -> Duration {
        Duration::from_secs(1)
    }

    /// etcd's lease TTLs are whole seconds, and none shorter than its
    /// minimum (once a grant showed it). A lock-delay of 0 stays 0.
    fn applied_ms(&self, ms: u64) -> u64 {
        if ms == 0 {
            return 0;
        }
        ms.div_ceil(1_000)
            .saturating_mul(1_000)
            .max(self.client().min_ttl_ms())
    }

    fn watchers(&self) -> &Watchers {
        &self.inner.watchers
    }

    fn channel(&self, name: &str, event: Event) -> String {
        crate::store::watch::name_channel(name, event)
    }

    /// As every store's, within the store timeout: a stream that stalled
    /// (a frozen member) leaves the subscribe unconfirmed, and the watch
    /// fails UNAVAILABLE in time (the stream is replaced meanwhile).
    async fn watch(&self, name: &str, event: Event, waiter: Option<&str>) -> Result<Watch> {
        let timeout = self.client().timeout();
        tokio::time::timeout(
            timeout,
            self.watchers().watch(&self.channel(name, event), waiter),
        )
        .await
        .map_err(|_| super::timed_out("etcd", "Watch (create)", timeout))?
    }

    /// etcd has no clock to read (expiry is its leader's lessor's), so the
    /// ping reads none; it fails while the cluster has no leader or raises
    /// an alarm (a full database takes no writes), and finds an etcd
    /// version that may revoke live leases in a cluster of several members
    /// (etcd#15247; one member is never deposed).
    async fn ping(&self) -> Result<Ping> {
        let (status, members) = tokio::join!(self.client().status(), self.client().members());
        let status = status?;
        if status.leader == 0 {
            return Err(Error::Unavailable(
                "etcd has no leader (no quorum of its members): it takes no writes".into(),
            ));
        }
        if !status.errors.is_empty() {
            return Err(Error::Unavailable(format!(
                "etcd reports {}: it may take no writes",
                status.errors.join("; ")
            )));
        }
        let mut ping = Ping::default();
        match members {
            Ok(members) if members > 1 && revokes_early(&status.version) => {
                ping.settings.findings.push(Finding {
                    setting: Setting::EtcdVersion,
                    value: format!("{} in a cluster of {members} members", status.version),
                });
            }
            Ok(_) => {}
            Err(e) => ping.settings.unread = Some(format!("etcd's members: {e}")),
        }
        Ok(ping)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// etcd#15247 was fixed in 3.4.31 and 3.5.13.
    #[test]
    fn the_versions_that_revoke_early() {
        for (version, affected) in [
            ("3.4.23", true),
            ("3.4.30", true),
            ("3.4.31", false),
            ("3.5.12", true),
            ("3.5.13", false),
            ("3.5.13-rc.0", false),
            ("3.6.0", false),
            ("3.3.27", true),
            ("2.3.8", true),
            ("", false),
            ("unknown", false),
        ] {
            assert_eq!(revokes_early(version), affected, "{version}");
        }
    }
}
