//! What each script answers, typed: one reply type per script, read field
//! by field in the order its header (`lua/*.lua`) lists them, each field by
//! name, so that a reply that does not read (a script changed on one side
//! only, a broken or hostile Redis) is an INTERNAL error naming the script
//! and the field, never a panic and never UNAVAILABLE (a retry would get the
//! same reply).
//!
//! Where the store already has a type that is exactly the reply
//! ([`Acquired`], [`Checked<()>`], [`Revocation`]), the script reads into
//! it; the others carry what the store needs besides (the last fence a
//! description saw, for the store's fence floor), or read the items of a
//! batch.

use redis::Value;

use crate::{
    error::{Error, Result},
    store::{
        contract::{
            GRANT_GRANTED, GRANT_HELD, GRANT_LOCK_DELAY, GRANT_QUEUE, LEASE_DONE, LEASE_NOT_A_LOCK,
            LEASE_RELEASED_ALREADY, REVOKE_ALREADY, REVOKE_DONE, REVOKE_NOTHING,
        },
        ended, Acquired, Blocked, BlockedBy, Checked, Described, LeaseInfo, Renewed, Revocation,
    },
};

/// A script's reply, read from its fields.
pub(super) trait Reply: Sized {
    fn read(fields: &mut Fields<'_>) -> Result<Self>;
}

/// Reads `value`, the reply of `file`: an array's elements are its fields,
/// any other value (dequeue.lua's integer) is its one field.
pub(super) fn decode<R: Reply>(file: &'static str, value: Value) -> Result<R> {
    let fields = match value {
        Value::Array(fields) => fields,
        other => vec![other],
    };
    R::read(&mut Fields::new(file, &fields))
}

/// A sequential reader of a script's reply: each call takes the next field
/// and names it, for the error when it is missing or of the wrong kind.
pub(super) struct Fields<'a> {
    file: &'static str,
    reply: &'a [Value],
    next: usize,
}

impl<'a> Fields<'a> {
    pub fn new(file: &'static str, reply: &'a [Value]) -> Self {
        Fields {
            file,
            reply,
            next: 0,
        }
    }

    /// Whether fields are left (for replies of one field per item).
    pub fn more(&self) -> bool {
        self.next < self.reply.len()
    }

    fn take(&mut self, name: &str) -> Result<&'a Value> {
        let i = self.next;
        self.next += 1;
        self.reply.get(i).ok_or_else(|| {
            Error::Internal(format!(
                "{} reply has no {name} (element {i}): {:?}",
                self.file, self.reply
            ))
        })
    }

    fn wrong(&self, name: &str, kind: &str, value: &Value) -> Error {
        Error::Internal(format!(
            "{} reply's {name} (element {}) is not {kind}: {value:?}",
            self.file,
            self.next - 1
        ))
    }

    pub fn int(&mut self, name: &str) -> Result<i64> {
        match self.take(name)? {
            Value::Int(n) => Ok(*n),
            other => Err(self.wrong(name, "an integer", other)),
        }
    }

    /// A count or a time: PTTL can answer -1/-2 in a race with expiry,
    /// which reads as no time left.
    pub fn uint(&mut self, name: &str) -> Result<u64> {
        Ok(u64::try_from(self.int(name)?).unwrap_or(0))
    }

    /// A count the script adds only when it has one: 0 when absent (or not
    /// a number).
    pub fn uint_or_zero(&mut self, name: &str) -> u64 {
        self.uint(name).unwrap_or(0)
    }

    /// A string; nil reads as empty.
    pub fn text(&mut self, name: &str) -> Result<String> {
        match self.take(name)? {
            Value::BulkString(bytes) => Ok(String::from_utf8_lossy(bytes).into_owned()),
            Value::SimpleString(s) => Ok(s.clone()),
            Value::Nil => Ok(String::new()),
            other => Err(self.wrong(name, "a string", other)),
        }
    }

    /// A field the store does not read, whatever it is (or if missing).
    pub fn skip(&mut self, _name: &str) {
        self.next += 1;
    }
}

/// acquire.lua, semaphore_acquire.lua: `{GRANT_GRANTED, fence, ttl_ms, "",
/// granted_at_ms, [expired]}` when granted, `{GRANT_HELD | GRANT_LOCK_DELAY
/// | GRANT_QUEUE, fence, remaining_ms, holder, granted_at_ms, position,
/// queued, [expired]}` when not (the codes: `store::contract`).
impl Reply for Acquired {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let code = fields.int("code")?;
        let fence = fields.uint("fence")?;
        let by = match code {
            GRANT_GRANTED => {
                fields.skip("ttl_ms");
                fields.skip("holder");
                fields.skip("granted_at_ms");
                return Ok(Acquired::Granted {
                    fence,
                    expired: u32::try_from(fields.uint_or_zero("expired")).unwrap_or(u32::MAX),
                });
            }
            GRANT_HELD => BlockedBy::Holder,
            GRANT_LOCK_DELAY => BlockedBy::LockDelay,
            GRANT_QUEUE => BlockedBy::Queue,
            other => return Err(Error::Internal(format!("acquire reply code {other}"))),
        };
        let remaining_ms = fields.uint("remaining_ms")?;
        let holder = fields.text("holder")?;
        fields.skip("granted_at_ms");
        Ok(Acquired::Blocked(Blocked {
            by,
            fence,
            remaining_ms,
            holder,
            position: fields.uint("position")?,
            queued: fields.uint("queued")?,
            expired: u32::try_from(fields.uint_or_zero("expired")).unwrap_or(u32::MAX),
        }))
    }
}

/// renew.lua, renew_permit.lua (and each item of renew_many.lua): `{code,
/// ttl_ms, fence}`.
pub(super) struct Renewal {
    pub outcome: Checked<Renewed>,
}

impl Renewal {
    fn read_after_code(code: i64, fields: &mut Fields<'_>) -> Result<Self> {
        let ttl_ms = if code == LEASE_DONE {
            fields.uint("ttl_ms")?
        } else {
            fields.skip("ttl_ms");
            0
        };
        let fence = fields.uint("fence")?;
        Renewal::new(code, ttl_ms, fence)
    }

    fn new(code: i64, ttl_ms: u64, fence: u64) -> Result<Self> {
        let outcome = if code == LEASE_DONE {
            Checked::Done(Renewed { ttl_ms, fence })
        } else {
            ended(code, fence).ok_or_else(|| Error::Internal(format!("renew reply code {code}")))?
        };
        Ok(Renewal { outcome })
    }

    /// One item of renew_many.lua's reply: `code ttl_ms fence`.
    fn parse(item: &str) -> Result<Self> {
        let bad = || {
            Error::Internal(format!(
                "renew_many.lua reply item {item:?} is not 'code ttl_ms fence'"
            ))
        };
        let mut values = item.split(' ');
        let mut next = || values.next().ok_or_else(bad);
        let code: i64 = next()?.parse().map_err(|_| bad())?;
        let ttl_ms: u64 = next()?.parse().map_err(|_| bad())?;
        let fence: u64 = next()?.parse().map_err(|_| bad())?;
        if values.next().is_some() {
            return Err(bad());
        }
        Renewal::new(code, ttl_ms, fence)
    }
}

impl Reply for Renewal {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let code = fields.int("code")?;
        Renewal::read_after_code(code, fields)
    }
}

/// renew_lock.lua: a renew.lua reply, or `{LEASE_NOT_A_LOCK, 0, 0}` when the lease record
/// knows nothing of the token (it may be a semaphore permit).
pub(super) enum LockRenewal {
    Renewal(Renewal),
    NotALock,
}

impl Reply for LockRenewal {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        match fields.int("code")? {
            LEASE_NOT_A_LOCK => Ok(LockRenewal::NotALock),
            code => Renewal::read_after_code(code, fields).map(LockRenewal::Renewal),
        }
    }
}

/// renew_many.lua: one renew.lua reply per lease, in order, in one string:
/// `"code ttl_ms fence,code ttl_ms fence,..."` (one value for redis-rs to
/// parse, not three per lease).
pub(super) struct Renewals(pub Vec<Renewal>);

impl Reply for Renewals {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let text = fields.text("renewals")?;
        if text.is_empty() {
            return Ok(Renewals(Vec::new()));
        }
        text.split(',')
            .map(Renewal::parse)
            .collect::<Result<Vec<_>>>()
            .map(Renewals)
    }
}

/// release.lua: `{code, fence}`.
impl Reply for Checked<()> {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let code = fields.int("code")?;
        let fence = fields.uint("fence")?;
        Ok(match code {
            LEASE_DONE => Checked::Done(()),
            LEASE_RELEASED_ALREADY => Checked::Released,
            other => ended(other, fence)
                .ok_or_else(|| Error::Internal(format!("release reply code {other}")))?,
        })
    }
}

/// revoke.lua: `{code, fence}`.
impl Reply for Revocation {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let code = fields.int("code")?;
        let fence = fields.uint("fence")?;
        Ok(match code {
            REVOKE_DONE => Revocation::Revoked { fence },
            REVOKE_ALREADY => Revocation::Already { fence },
            REVOKE_NOTHING => Revocation::NotHeld,
            other => return Err(Error::Internal(format!("revoke reply code {other}"))),
        })
    }
}

/// describe.lua: `{1, fence, remaining_ms, holder, granted_at_ms, ttl_ms,
/// lock_delay_ms, waiters, permits}` when held, `{0, fence,
/// delay_remaining_ms, waiters, permits}` when free.
pub(super) struct Description {
    pub described: Described,
    /// The last fence Redis remembers for the name (0 if none): raises the
    /// store's fence floor.
    pub fence: u64,
}

impl Reply for Description {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let held = fields.int("code")? != 0;
        let fence = fields.uint("fence")?;
        let described = if held {
            let lease = LeaseInfo {
                fence,
                remaining_ms: fields.uint("remaining_ms")?,
                holder: fields.text("holder")?,
                granted_at_unix_ms: fields.uint("granted_at_ms")?,
                ttl_ms: fields.uint("ttl_ms")?,
                lock_delay_ms: fields.uint("lock_delay_ms")?,
            };
            Described {
                waiters: fields.uint("waiters")?,
                permits: fields.uint("permits")?,
                lease: Some(lease),
                lock_delay_remaining_ms: 0,
            }
        } else {
            Described {
                lease: None,
                lock_delay_remaining_ms: fields.uint("delay_remaining_ms")?,
                waiters: fields.uint("waiters")?,
                permits: fields.uint("permits")?,
            }
        };
        Ok(Description { described, fence })
    }
}

/// refresh.lua: for each token, its rank in the line (0: first), or -1 if
/// it has no place (`None`).
pub(super) struct Ranks(pub Vec<Option<u64>>);

impl Reply for Ranks {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        let mut ranks = Vec::new();
        while fields.more() {
            ranks.push(u64::try_from(fields.int("rank")?).ok());
        }
        Ok(Ranks(ranks))
    }
}

/// dequeue.lua: 1 if the waiter was in line, 0 if not.
pub(super) struct Dequeued {
    /// Nobody reads it yet: the waiter is gone either way.
    #[allow(dead_code)]
    pub was_in_line: bool,
}

impl Reply for Dequeued {
    fn read(fields: &mut Fields<'_>) -> Result<Self> {
        Ok(Dequeued {
            was_in_line: fields.int("removed")? > 0,
        })
    }
}

/// Reads an acquire.lua / semaphore_acquire.lua reply (for the fuzz
/// targets, see `crate::fuzzing`).
pub(crate) fn acquire_reply(reply: &[Value]) -> Result<Acquired> {
    Acquired::read(&mut Fields::new("acquire.lua", reply))
}

/// Reads a renew.lua reply (for the fuzz targets).
pub(crate) fn renew_reply(reply: &[Value]) -> Result<Checked<Renewed>> {
    Renewal::read(&mut Fields::new("renew.lua", reply)).map(|r| r.outcome)
}

/// Reads a release.lua reply (for the fuzz targets).
pub(crate) fn release_reply(reply: &[Value]) -> Result<Checked<()>> {
    Checked::read(&mut Fields::new("release.lua", reply))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A random value tree, as a broken or hostile Redis could answer.
    fn random_value(bytes: &mut impl Iterator<Item = u8>, depth: u32) -> Value {
        match bytes.next().unwrap_or(0) % 6 {
            0 => Value::Nil,
            1 => Value::Int(i64::from(bytes.next().unwrap_or(0).cast_signed()) * 1_000_003),
            2 => Value::BulkString(bytes.take(3).collect()),
            3 => Value::SimpleString("OK".into()),
            4 if depth < 3 => {
                let n = bytes.next().unwrap_or(0) % 9;
                Value::Array((0..n).map(|_| random_value(bytes, depth + 1)).collect())
            }
            _ => Value::Okay,
        }
    }

    /// Property: whatever Redis answers, reading it gives a result or an
    /// internal error, never a panic; and well-formed replies read right.
    #[test]
    fn script_replies_are_read_without_panicking() {
        let mut seed = vec![0u8; 64 * 1024];
        getrandom::fill(&mut seed).unwrap();
        let mut bytes = seed.into_iter();
        for _ in 0..5_000 {
            let value = random_value(&mut bytes, 0);
            let reply = match value.clone() {
                Value::Array(items) => items,
                other => vec![other],
            };
            let _ = acquire_reply(&reply);
            let _ = renew_reply(&reply);
            let _ = release_reply(&reply);
            let _ = decode::<Renewals>("renew_many.lua", value.clone());
            let _ = decode::<Description>("describe.lua", value.clone());
            let _ = decode::<Ranks>("refresh.lua", value.clone());
            let _ = decode::<LockRenewal>("renew_lock.lua", value);
        }
        let granted = [
            Value::Int(1),
            Value::Int(42),
            Value::Int(1_000),
            Value::BulkString(vec![]),
            Value::Int(7),
            Value::Int(7),
        ];
        assert_eq!(
            acquire_reply(&granted).unwrap(),
            Acquired::Granted {
                fence: 42,
                expired: 7
            }
        );
        let mut queued = [3, 9, 250, 0, 0, 2, 5].map(Value::Int);
        queued[3] = Value::BulkString(Vec::new());
        let Acquired::Blocked(blocked) = acquire_reply(&queued).unwrap() else {
            panic!("not blocked")
        };
        assert_eq!(
            (
                blocked.by,
                blocked.remaining_ms,
                blocked.position,
                blocked.queued
            ),
            (BlockedBy::Queue, 250, 2, 5)
        );
        assert_eq!(
            renew_reply(&[-2, 0, 9].map(Value::Int)).unwrap(),
            Checked::Revoked { fence: 9 }
        );
        assert!(matches!(
            renew_reply(&[7, 0, 9].map(Value::Int)),
            Err(Error::Internal(_))
        ));
    }

    /// Each reply reads as its script's header defines it, renew_many's
    /// flat one included, and a count from an expiry race reads as none left.
    #[test]
    fn typed_replies_read_their_scripts_headers() {
        let free = Value::Array([0, 12, 300, 2, 1].map(Value::Int).to_vec());
        let Description { described, fence } = decode("describe.lua", free).unwrap();
        assert_eq!(fence, 12);
        assert_eq!(described.lease, None);
        assert_eq!(
            (
                described.lock_delay_remaining_ms,
                described.waiters,
                described.permits
            ),
            (300, 2, 1)
        );
        let renewals = Value::BulkString(b"1 5000 1796080931737054,-3 0 0,-5 0 0".to_vec());
        let Renewals(renewals) = decode("renew_many.lua", renewals).unwrap();
        for cut_short in ["1 5000 8,1", "1 5000", "1 5000 8 9", "1 x 8", ""] {
            let reply = Value::BulkString(cut_short.as_bytes().to_vec());
            let read = decode::<Renewals>("renew_many.lua", reply).map(|Renewals(r)| r.len());
            assert!(
                read.is_err() || cut_short.is_empty() && matches!(read, Ok(0)),
                "{cut_short:?} read as {:?}",
                read.ok()
            );
        }
        let outcomes: Vec<_> = renewals.into_iter().map(|r| r.outcome).collect();
        assert_eq!(
            outcomes,
            [
                Checked::Done(Renewed {
                    ttl_ms: 5_000,
                    fence: 1_796_080_931_737_054
                }),
                Checked::Expired,
                Checked::ExpiredReported
            ]
        );
        let ranks = Value::Array([0, -1, 4].map(Value::Int).to_vec());
        let Ranks(ranks) = decode("refresh.lua", ranks).unwrap();
        assert_eq!(ranks, [Some(0), None, Some(4)]);
        let not_a_lock = Value::Array([3, 0, 0].map(Value::Int).to_vec());
        assert!(matches!(
            decode("renew_lock.lua", not_a_lock).unwrap(),
            LockRenewal::NotALock
        ));
        let Dequeued { was_in_line } = decode("dequeue.lua", Value::Int(1)).unwrap();
        assert!(was_in_line);
        assert_eq!(
            Fields::new("t.lua", &[Value::Int(-2)]).uint("ttl").unwrap(),
            0
        );
    }

    /// A reply that does not read is our bug (or a broken Redis), never an
    /// outage a retry would cure; the error names the script and the field.
    #[test]
    fn unreadable_replies_are_internal_errors_naming_the_field() {
        let Err(Error::Internal(missing)) = acquire_reply(&[Value::Int(0)]) else {
            panic!("a missing fence reads")
        };
        assert!(
            missing.contains("acquire.lua") && missing.contains("fence"),
            "{missing}"
        );
        let Err(Error::Internal(wrong)) = Fields::new("t.lua", &[Value::Nil]).int("code") else {
            panic!("nil reads as an integer")
        };
        assert!(
            wrong.contains("code") && wrong.contains("not an integer"),
            "{wrong}"
        );
        assert!(matches!(
            decode::<Ranks>("refresh.lua", Value::Array(vec![Value::Nil])),
            Err(Error::Internal(_))
        ));
    }
}
