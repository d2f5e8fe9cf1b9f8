//! What a name's record nodes hold (docs/design/zookeeper.md, sections
//! 3.3 to 3.7), and how a lease is judged by the leader's stamps.
//!
//! A lease node (`lock`, `p-<token>`) holds its [`Holding`]; its `czxid`
//! gives the fence (the grant's write) and its `mtime` the leader's time
//! of the grant or the last renewal, from which it lasts `ttl_ms`. The
//! data is text, one field a line, the holder label last (it is printable
//! text and may hold spaces, never a line break), so that an operator's
//! `zkCli.sh get` reads it.

use crate::error::{Error, Result};

/// The format of the records this broker writes (the first line).
const FORMAT: &str = "v1";

/// A lease as its node holds it (the owner token is in the data: the
/// name of a lock node is fixed, and a permit's carries it too).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holding {
    /// The owner token.
    pub token: String,
    /// The TTL it was granted or last renewed with, in ms.
    pub ttl_ms: u64,
    /// Its lock-delay, in ms (0: none).
    pub lock_delay_ms: u64,
    /// The name's limit: 1 for a lock, more for a semaphore.
    pub limit: u32,
    /// The holder label.
    pub holder: String,
}

impl Holding {
    /// The node's data.
    pub fn encode(&self) -> Vec<u8> {
        format!(
            "{FORMAT}\n{}\n{}\n{}\n{}\n{}",
            self.token, self.ttl_ms, self.lock_delay_ms, self.limit, self.holder
        )
        .into_bytes()
    }

    /// A node's data read back; an error names `path`.
    pub fn decode(data: &[u8], path: &str) -> Result<Self> {
        let bad = || Error::Internal(format!("ZooKeeper node {path} holds no lease record"));
        let text = std::str::from_utf8(data).map_err(|_| bad())?;
        let mut lines = text.splitn(6, '\n');
        if lines.next() != Some(FORMAT) {
            return Err(bad());
        }
        let mut field = || lines.next().ok_or_else(bad);
        let token = field()?.to_owned();
        let ttl_ms = field()?.parse().map_err(|_| bad())?;
        let lock_delay_ms = field()?.parse().map_err(|_| bad())?;
        let limit = field()?.parse().map_err(|_| bad())?;
        let holder = field()?.to_owned();
        Ok(Holding {
            token,
            ttl_ms,
            lock_delay_ms,
            limit,
            holder,
        })
    }
}

/// How a token's lease ended, as its end record (`e-<token>`) holds it:
/// what its holder's late request hears, for `LINGER_MS` after the end.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum End {
    /// Its holder released it.
    Released,
    /// An operator revoked it; its fence.
    Revoked(u64),
    /// It expired and its loss was reported; its fence.
    Expired(u64),
}

impl End {
    /// The node's data: `x`, `r<fence>` or `e<fence>`.
    pub fn encode(self) -> Vec<u8> {
        match self {
            End::Released => b"x".to_vec(),
            End::Revoked(fence) => format!("r{fence}").into_bytes(),
            End::Expired(fence) => format!("e{fence}").into_bytes(),
        }
    }

    /// A node's data read back; an error names `path`.
    pub fn decode(data: &[u8], path: &str) -> Result<Self> {
        let bad = || Error::Internal(format!("ZooKeeper node {path} holds no end record"));
        let text = std::str::from_utf8(data).map_err(|_| bad())?;
        let fence = |digits: &str| digits.parse::<u64>().map_err(|_| bad());
        match text.split_at_checked(1) {
            Some(("x", "")) => Ok(End::Released),
            Some(("r", digits)) => Ok(End::Revoked(fence(digits)?)),
            Some(("e", digits)) => Ok(End::Expired(fence(digits)?)),
            _ => Err(bad()),
        }
    }
}

/// A lock-delay, as the name's `delay` node holds it: the name is not
/// granted until `delay_ms` after `start_unix_ms` (the leader's clock), or
/// after the node's own `ctime` when `start_unix_ms` is 0 (a revoke: the
/// delay starts with the write that ends the lease).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Delay {
    /// The fence of the lease whose involuntary end started it.
    pub fence: u64,
    /// How long it lasts, in ms.
    pub delay_ms: u64,
    /// When it started (the lease's expiry), or 0 for the node's `ctime`.
    pub start_unix_ms: u64,
}

impl Delay {
    /// The node's data.
    pub fn encode(self) -> Vec<u8> {
        format!(
            "{FORMAT}\n{}\n{}\n{}",
            self.fence, self.delay_ms, self.start_unix_ms
        )
        .into_bytes()
    }

    /// A node's data read back; an error names `path`.
    pub fn decode(data: &[u8], path: &str) -> Result<Self> {
        let bad = || Error::Internal(format!("ZooKeeper node {path} holds no lock-delay"));
        let text = std::str::from_utf8(data).map_err(|_| bad())?;
        let mut lines = text.split('\n');
        if lines.next() != Some(FORMAT) {
            return Err(bad());
        }
        let mut number =
            || -> Result<u64> { lines.next().ok_or_else(bad)?.parse().map_err(|_| bad()) };
        Ok(Delay {
            fence: number()?,
            delay_ms: number()?,
            start_unix_ms: number()?,
        })
    }

    /// When it started, for a node created at `created` (the leader's
    /// stamp of the node's creation).
    pub fn started(self, created: LeaderTime) -> LeaderTime {
        LeaderTime {
            unix_ms: if self.start_unix_ms == 0 {
                created.unix_ms
            } else {
                self.start_unix_ms
            },
            epoch: created.epoch,
        }
    }
}

/// A time the leader stamped, with its epoch: stamps of different epochs
/// are of different leaders' clocks, and are never compared.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct LeaderTime {
    /// The leader's wall clock, in ms since the Unix epoch.
    pub unix_ms: u64,
    /// The epoch of the write that carried it.
    pub epoch: u32,
}

/// What a lease's node says of it at a later stamp `now`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Judged {
    /// Alive for this many more ms (from `now`).
    Live(u64),
    /// Ended this many ms before `now` (0: at `now`).
    Ended(u64),
    /// Stamped by another leader than `now`, or by this leader's clock
    /// before it stepped back (`now` is earlier than the stamp it follows):
    /// its end cannot be read off this stamp; the lease is to be rewritten
    /// (its `mtime` becomes this clock's now) and judged again. Until then
    /// it counts as live: a leader change, or a step of the leader's clock
    /// back, can lengthen a lease by up to its TTL, never end it early (as
    /// on etcd, whose leader change renews every lease), and never by the
    /// step (a dead holder's lock is not held off for an hour by a clock
    /// stepped back an hour).
    OtherEpoch,
}

/// Judges a lease renewed (or granted) at `renewed` for `ttl_ms`, at the
/// later stamp `now`.
pub fn judge(renewed: LeaderTime, ttl_ms: u64, now: LeaderTime) -> Judged {
    if renewed.epoch != now.epoch || now.unix_ms < renewed.unix_ms {
        return Judged::OtherEpoch;
    }
    let end = renewed.unix_ms.saturating_add(ttl_ms);
    if now.unix_ms < end {
        Judged::Live(end - now.unix_ms)
    } else {
        Judged::Ended(now.unix_ms - end)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_holding_reads_back_whatever_its_label() {
        for holder in ["", "pod-a", "host 1:4242 (batch)", "x\ty"] {
            let h = Holding {
                token: "0123456789abcdef0123456789abcdef".into(),
                ttl_ms: 10_000,
                lock_delay_ms: 500,
                limit: 3,
                holder: holder.into(),
            };
            assert_eq!(Holding::decode(&h.encode(), "/n/0/a/lock").unwrap(), h);
        }
        for bad in [
            &b""[..],
            b"v2\nt\n1\n0\n1\nh",
            b"v1\nt\nx\n0\n1\nh",
            b"v1\nt\n1\n0",
        ] {
            let err = Holding::decode(bad, "/n/0/a/lock").unwrap_err();
            assert!(err.to_string().contains("/n/0/a/lock"), "{err}");
        }
    }

    #[test]
    fn a_delay_reads_back_and_starts_when_it_says() {
        let created = LeaderTime {
            unix_ms: 5_000,
            epoch: 2,
        };
        for delay in [
            Delay {
                fence: 9,
                delay_ms: 1_000,
                start_unix_ms: 0,
            },
            Delay {
                fence: 9,
                delay_ms: 1_000,
                start_unix_ms: 4_200,
            },
        ] {
            assert_eq!(Delay::decode(&delay.encode(), "d").unwrap(), delay);
        }
        let revoked = Delay {
            fence: 9,
            delay_ms: 1_000,
            start_unix_ms: 0,
        };
        assert_eq!(revoked.started(created).unix_ms, 5_000);
        let expired = Delay {
            start_unix_ms: 4_200,
            ..revoked
        };
        assert_eq!(
            expired.started(created),
            LeaderTime {
                unix_ms: 4_200,
                epoch: 2
            }
        );
        assert!(Delay::decode(b"v1\n1\n2", "d").is_err());
    }

    #[test]
    fn an_end_reads_back() {
        for end in [End::Released, End::Revoked(7), End::Expired(u64::MAX)] {
            assert_eq!(End::decode(&end.encode(), "e").unwrap(), end);
        }
        for bad in [&b""[..], b"x1", b"r", b"e-1", b"q5"] {
            assert!(End::decode(bad, "e").is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_lease_is_judged_by_stamps_of_its_own_epoch_only() {
        let at = |unix_ms, epoch| LeaderTime { unix_ms, epoch };
        assert_eq!(judge(at(1_000, 3), 500, at(1_200, 3)), Judged::Live(300));
        assert_eq!(judge(at(1_000, 3), 500, at(1_500, 3)), Judged::Ended(0));
        assert_eq!(judge(at(1_000, 3), 500, at(9_000, 3)), Judged::Ended(7_500));
        // Another leader's clock, however far it says: not comparable.
        assert_eq!(judge(at(1_000, 3), 500, at(9_000, 4)), Judged::OtherEpoch);
        // This leader's clock stepped back (a later write stamped earlier):
        // not comparable either; never "alive for the step and the TTL".
        assert_eq!(
            judge(at(3_601_000, 3), 500, at(1_200, 3)),
            Judged::OtherEpoch
        );
        assert_eq!(
            judge(at(u64::MAX - 1, 3), 500, at(u64::MAX, 3)),
            Judged::Ended(0),
            "saturates, and ends at the end of time"
        );
    }
}
