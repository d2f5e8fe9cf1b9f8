//! The readers of the Lua scripts' replies
//! (`server/src/store/redis/replies.rs`), fed any reply a broken or hostile
//! Redis could send: a tree of RESP values decoded from the input.
//!
//! Asserts that a reply reads as the scripts' headers (`server/src/store/lua/`)
//! define it, element by element, and that anything else is an INTERNAL
//! error (never UNAVAILABLE, which would make a client retry a reply that
//! will not change; never a panic).

#![no_main]

use leasehold_server::{
    fuzzing::{self, Value},
    store::{Acquired, Blocked, BlockedBy, Checked, Renewed},
    Error,
};
use libfuzzer_sys::fuzz_target;

/// A tiny decoder: one byte chooses the kind of value, the next ones give
/// its content. Integers favour the small values the scripts' codes use.
struct Input<'a>(&'a [u8]);

impl Input<'_> {
    fn byte(&mut self) -> u8 {
        let (&b, rest) = self.0.split_first().unwrap_or((&0, &[]));
        self.0 = rest;
        b
    }

    fn bytes(&mut self) -> Vec<u8> {
        let n = usize::from(self.byte() % 16).min(self.0.len());
        let (taken, rest) = self.0.split_at(n);
        self.0 = rest;
        taken.to_vec()
    }

    fn int(&mut self) -> i64 {
        match self.byte() % 4 {
            0 => i64::from(self.byte() as i8),
            1 => i64::from(self.byte() % 8) - 4,
            _ => i64::from_le_bytes(std::array::from_fn(|_| self.byte())),
        }
    }

    fn value(&mut self, depth: u32) -> Value {
        match self.byte() % 10 {
            0 => Value::Nil,
            1 | 2 => Value::Int(self.int()),
            3 => Value::BulkString(self.bytes()),
            4 => Value::SimpleString(String::from_utf8_lossy(&self.bytes()).into_owned()),
            5 => Value::Okay,
            6 => Value::Double(f64::from_bits(self.int() as u64)),
            7 => Value::Boolean(self.byte() % 2 == 1),
            8 if depth < 4 => Value::Array(self.values(depth + 1)),
            9 if depth < 4 => Value::Map(
                self.values(depth + 1)
                    .into_iter()
                    .map(|v| (v, Value::Nil))
                    .collect(),
            ),
            _ => Value::Nil,
        }
    }

    fn values(&mut self, depth: u32) -> Vec<Value> {
        let n = self.byte() % 10;
        (0..n).map(|_| self.value(depth)).collect()
    }
}

fn int(reply: &[Value], i: usize) -> Option<i64> {
    match reply.get(i)? {
        Value::Int(n) => Some(*n),
        _ => None,
    }
}

/// PTTL's -1/-2 (expiry races) read as 0.
fn uint(reply: &[Value], i: usize) -> Option<u64> {
    int(reply, i).map(|n| n.max(0) as u64)
}

fn text(reply: &[Value], i: usize) -> Option<String> {
    match reply.get(i)? {
        Value::BulkString(b) => Some(String::from_utf8_lossy(b).into_owned()),
        Value::SimpleString(s) => Some(s.clone()),
        Value::Nil => Some(String::new()),
        _ => None,
    }
}

/// What acquire.lua's header says: `{1, fence, _, _, _, [expired]}` or
/// `{0|2|3, fence, remaining_ms, holder, _, position, queued, [expired]}`.
fn acquire(reply: &[Value]) -> Option<Acquired> {
    let fence = uint(reply, 1)?;
    let code = int(reply, 0)?;
    // A count beyond u32 saturates (no store reports four billion expired
    // leases at once; truncating would report a wrong small count).
    let expired = |i| uint(reply, i).map_or(0, |n| u32::try_from(n).unwrap_or(u32::MAX));
    let by = match code {
        1 => {
            return Some(Acquired::Granted {
                fence,
                expired: expired(5),
            })
        }
        0 => BlockedBy::Holder,
        2 => BlockedBy::LockDelay,
        3 => BlockedBy::Queue,
        _ => return None,
    };
    Some(Acquired::Blocked(Blocked {
        by,
        fence,
        remaining_ms: uint(reply, 2)?,
        holder: text(reply, 3)?,
        position: uint(reply, 5)?,
        queued: uint(reply, 6)?,
        expired: expired(7),
    }))
}

/// Codes shared by renew.lua and release.lua for a lease not the caller's.
fn ended<T>(code: i64, fence: u64) -> Option<Checked<T>> {
    Some(match code {
        0 => Checked::NotHeld,
        -1 => Checked::NotOwner { fence },
        -2 => Checked::Revoked { fence },
        -3 => Checked::Expired,
        -4 => Checked::Released,
        -5 => Checked::ExpiredReported,
        _ => return None,
    })
}

/// renew.lua: `{code, ttl_ms, fence}`.
fn renew(reply: &[Value]) -> Option<Checked<Renewed>> {
    let fence = uint(reply, 2)?;
    match int(reply, 0)? {
        1 => Some(Checked::Done(Renewed {
            ttl_ms: uint(reply, 1)?,
            fence,
        })),
        code => ended(code, fence),
    }
}

/// release.lua: `{code, fence}`.
fn release(reply: &[Value]) -> Option<Checked<()>> {
    let fence = uint(reply, 1)?;
    match int(reply, 0)? {
        1 => Some(Checked::Done(())),
        2 => Some(Checked::Released),
        code => ended(code, fence),
    }
}

fn check<T: PartialEq + std::fmt::Debug>(
    what: &str,
    reply: &[Value],
    got: leasehold_server::Result<T>,
    want: Option<T>,
) {
    match (got, want) {
        (Ok(got), Some(want)) => assert_eq!(got, want, "{what}: {reply:?}"),
        (Err(Error::Internal(_)), None) => {}
        (got, want) => panic!("{what} of {reply:?}: got {got:?}, want {want:?}"),
    }
}

fuzz_target!(|data: &[u8]| {
    let mut input = Input(data);
    let reply = input.values(0);
    check(
        "acquire",
        &reply,
        fuzzing::acquire_reply(&reply),
        acquire(&reply),
    );
    check("renew", &reply, fuzzing::renew_reply(&reply), renew(&reply));
    check(
        "release",
        &reply,
        fuzzing::release_reply(&reply),
        release(&reply),
    );
});
