//! What a run did, call by call: the [`Recorder`] every client writes to
//! (invocation and completion times on one monotonic clock, the answer or
//! [`Answer::Unknown`]), and a line format for histories, so that a failing
//! one can be saved, printed and checked again without the servers
//! (`LEASEHOLD_MODEL_HISTORY=file scripts/model-check`).
//!
//! Owner tokens never reach the model or a file: the recorder numbers them.

use std::{
    collections::HashMap,
    fmt::Write as _,
    sync::Mutex,
    time::{Duration, Instant},
};

use super::spec::{Answer, Call, Kind, Micros, Reason, Token};

/// How long after its invocation a call that got no answer may still take
/// effect: the client's own deadline is at most this minus the longest
/// fault the nemesis holds (a request held in a stalled proxy, or by a
/// stopped broker, is sent when the fault ends), plus the store timeout.
pub const UNKNOWN_WINDOW: Micros = 12_000_000;

/// One call about one name.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Op {
    /// The client that made it (its index in the workload), or
    /// `usize::MAX` for an event of the store the nemesis recorded.
    pub client: usize,
    /// The name it was about. A store event is recorded once, with `*`,
    /// and [`linear::by_name`](super::linear::by_name) gives every name a
    /// copy.
    pub name: String,
    /// What was asked (tokens as the recorder's numbers).
    pub call: Call,
    /// What came back, [`Answer::Unknown`] if nothing did.
    pub answer: Answer,
    /// When the call was sent.
    pub invoked: Micros,
    /// When the answer came; for [`Answer::Unknown`], the end of the
    /// window in which the call may have taken effect.
    pub returned: Micros,
}

/// Where a run's calls are recorded.
pub struct Recorder {
    start: Instant,
    ops: Mutex<Vec<Op>>,
    tokens: Mutex<HashMap<String, Token>>,
}

impl Recorder {
    /// A recorder whose clock starts now: the instant 0 of the run.
    pub fn new() -> Self {
        Recorder {
            start: Instant::now(),
            ops: Mutex::new(Vec::new()),
            tokens: Mutex::new(HashMap::new()),
        }
    }

    /// Now, in microseconds since the run began.
    pub fn now(&self) -> Micros {
        micros_of(self.start.elapsed())
    }

    /// The instant `at` in the run's microseconds.
    pub fn micros(&self, at: Instant) -> Micros {
        micros_of(at.saturating_duration_since(self.start))
    }

    /// The number of an owner token (the same number for the same token).
    pub fn token(&self, secret: &str) -> Token {
        let mut tokens = self.tokens.lock().unwrap();
        // A wrapped number would make two leases one token to the model.
        let next = Token::try_from(tokens.len()).expect("fewer than 2^32 owner tokens in a run");
        *tokens.entry(secret.to_owned()).or_insert(next)
    }

    /// Records a call that returned `answer` at `returned`.
    pub fn record(
        &self,
        client: usize,
        name: &str,
        call: Call,
        answer: Answer,
        invoked: Micros,
        returned: Micros,
    ) {
        let returned = if answer == Answer::Unknown {
            invoked + UNKNOWN_WINDOW
        } else {
            returned
        };
        self.ops.lock().unwrap().push(Op {
            client,
            name: name.to_owned(),
            call,
            answer,
            invoked,
            returned,
        });
    }

    /// Every call recorded so far.
    pub fn ops(&self) -> Vec<Op> {
        self.ops.lock().unwrap().clone()
    }

    /// How long the run has lasted.
    pub fn elapsed(&self) -> Duration {
        self.start.elapsed()
    }
}

/// A time since the run began in [`Micros`], saturating (at 292,000 years).
fn micros_of(since_start: Duration) -> Micros {
    Micros::try_from(since_start.as_micros()).unwrap_or(Micros::MAX)
}

impl Default for Recorder {
    fn default() -> Self {
        Self::new()
    }
}

fn kind_text(kind: &Kind) -> String {
    match kind {
        Kind::Lock => "lock".into(),
        Kind::Permit { limit } => format!("sem:{limit}"),
    }
}

fn reason_text(r: Reason) -> &'static str {
    match r {
        Reason::Expired => "expired",
        Reason::NotOwner => "not_owner",
        Reason::StoreLost => "store_lost",
        Reason::Revoked => "revoked",
    }
}

/// One op as a line: `client name invoked returned | call | answer`, times
/// in µs since the run began, tokens as `t<n>`.
pub fn format_op(op: &Op) -> String {
    let mut s = format!(
        "{} {} {} {} | ",
        op.client, op.name, op.invoked, op.returned
    );
    match &op.call {
        Call::Acquire {
            kind,
            ttl_ms,
            wait_ms,
            lock_delay_ms,
            keep_place,
        } => write!(
            s,
            "acquire {} ttl={ttl_ms} wait={wait_ms} delay={lock_delay_ms} keep={}",
            kind_text(kind),
            u8::from(*keep_place)
        )
        .unwrap(),
        Call::Renew { token, ttl_ms } => write!(s, "renew t{token} ttl={ttl_ms}").unwrap(),
        Call::Beat { token, ttl_ms } => write!(s, "beat t{token} ttl={ttl_ms}").unwrap(),
        Call::Release { token } => write!(s, "release t{token}").unwrap(),
        Call::Revoke => s.push_str("revoke"),
        Call::CheckFence { fence } => write!(s, "checkfence {fence}").unwrap(),
        Call::Leader => s.push_str("leader"),
        Call::Write {
            token,
            fence,
            believed,
        } => write!(
            s,
            "write t{token} fence={fence} believed={}",
            u8::from(*believed)
        )
        .unwrap(),
        Call::Wipe => s.push_str("wipe"),
        Call::Failover => s.push_str("failover"),
        Call::ClockStep { delta_ms } => write!(s, "clockstep {delta_ms}").unwrap(),
    }
    s.push_str(" | ");
    match &op.answer {
        Answer::Granted {
            token,
            fence,
            ttl_ms,
        } => write!(s, "granted t{token} fence={fence} ttl={ttl_ms}").unwrap(),
        Answer::Aborted => s.push_str("aborted"),
        Answer::Alive { fence, ttl_ms } => write!(s, "alive fence={fence} ttl={ttl_ms}").unwrap(),
        Answer::Released => s.push_str("released"),
        Answer::NotFound => s.push_str("not_found"),
        Answer::NotOwner => s.push_str("not_owner"),
        Answer::Lost(r) => write!(s, "lost {}", reason_text(*r)).unwrap(),
        Answer::Revoked { fence } => write!(s, "revoked fence={fence}").unwrap(),
        Answer::Fence {
            current,
            current_fence,
        } => write!(
            s,
            "fence current={} fence={current_fence}",
            u8::from(*current)
        )
        .unwrap(),
        Answer::Unknown => s.push_str("unknown"),
        Answer::Leader { present, term } => {
            write!(s, "leader present={} term={term}", u8::from(*present)).unwrap();
        }
        Answer::Accepted => s.push_str("accepted"),
        Answer::Refused => s.push_str("refused"),
        Answer::Happened => s.push_str("happened"),
    }
    s
}

/// The value of `key=` among `words`.
fn field(words: &[&str], key: &str) -> Result<u64, String> {
    words
        .iter()
        .find_map(|w| w.strip_prefix(key).and_then(|v| v.strip_prefix('=')))
        .ok_or_else(|| format!("no {key}= in {words:?}"))?
        .parse()
        .map_err(|e| format!("{key}: {e}"))
}

fn token(word: Option<&&str>) -> Result<Token, String> {
    word.and_then(|w| w.strip_prefix('t'))
        .ok_or("a token t<n> expected")?
        .parse()
        .map_err(|e| format!("token: {e}"))
}

/// Parses a line of [`format_op`].
pub fn parse_op(line: &str) -> Result<Op, String> {
    let mut parts = line.split(" | ");
    let head: Vec<&str> = parts.next().unwrap_or("").split_whitespace().collect();
    let call: Vec<&str> = parts.next().ok_or("no call")?.split_whitespace().collect();
    let answer: Vec<&str> = parts
        .next()
        .ok_or("no answer")?
        .split_whitespace()
        .collect();
    let [client, name, invoked, returned] = head[..] else {
        return Err(format!("bad head {head:?}"));
    };
    let call = match call.first().copied() {
        Some("acquire") => Call::Acquire {
            kind: match call.get(1).copied() {
                Some("lock") => Kind::Lock,
                Some(k) => Kind::Permit {
                    limit: k
                        .strip_prefix("sem:")
                        .ok_or("kind")?
                        .parse()
                        .map_err(|_| "limit")?,
                },
                None => return Err("no kind".into()),
            },
            ttl_ms: field(&call, "ttl")?,
            wait_ms: field(&call, "wait")?,
            lock_delay_ms: field(&call, "delay")?,
            keep_place: field(&call, "keep")? == 1,
        },
        Some("renew") => Call::Renew {
            token: token(call.get(1))?,
            ttl_ms: field(&call, "ttl")?,
        },
        Some("beat") => Call::Beat {
            token: token(call.get(1))?,
            ttl_ms: field(&call, "ttl")?,
        },
        Some("release") => Call::Release {
            token: token(call.get(1))?,
        },
        Some("revoke") => Call::Revoke,
        Some("leader") => Call::Leader,
        Some("checkfence") => Call::CheckFence {
            fence: call.get(1).ok_or("fence")?.parse().map_err(|_| "fence")?,
        },
        Some("write") => Call::Write {
            token: token(call.get(1))?,
            fence: field(&call, "fence")?,
            believed: field(&call, "believed")? == 1,
        },
        Some("wipe") => Call::Wipe,
        Some("failover") => Call::Failover,
        Some("clockstep") => Call::ClockStep {
            delta_ms: call.get(1).ok_or("delta")?.parse().map_err(|_| "delta")?,
        },
        other => return Err(format!("unknown call {other:?}")),
    };
    let answer = match answer.first().copied() {
        Some("granted") => Answer::Granted {
            token: token(answer.get(1))?,
            fence: field(&answer, "fence")?,
            ttl_ms: field(&answer, "ttl")?,
        },
        Some("aborted") => Answer::Aborted,
        Some("alive") => Answer::Alive {
            fence: field(&answer, "fence")?,
            ttl_ms: field(&answer, "ttl")?,
        },
        Some("released") => Answer::Released,
        Some("not_found") => Answer::NotFound,
        Some("not_owner") => Answer::NotOwner,
        Some("lost") => Answer::Lost(match answer.get(1).copied() {
            Some("expired") => Reason::Expired,
            Some("not_owner") => Reason::NotOwner,
            Some("store_lost") => Reason::StoreLost,
            Some("revoked") => Reason::Revoked,
            r => return Err(format!("unknown reason {r:?}")),
        }),
        Some("revoked") => Answer::Revoked {
            fence: field(&answer, "fence")?,
        },
        Some("fence") => Answer::Fence {
            current: field(&answer, "current")? == 1,
            current_fence: field(&answer, "fence")?,
        },
        Some("unknown") => Answer::Unknown,
        Some("leader") => Answer::Leader {
            present: field(&answer, "present")? == 1,
            term: field(&answer, "term")?,
        },
        Some("accepted") => Answer::Accepted,
        Some("refused") => Answer::Refused,
        Some("happened") => Answer::Happened,
        other => return Err(format!("unknown answer {other:?}")),
    };
    Ok(Op {
        client: client.parse().map_err(|_| "client")?,
        name: name.to_owned(),
        call,
        answer,
        invoked: invoked.parse().map_err(|_| "invoked")?,
        returned: returned.parse().map_err(|_| "returned")?,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_op_survives_the_line_format() {
        let ops = [
            Op {
                client: 1,
                name: "a".into(),
                call: Call::Acquire {
                    kind: Kind::Permit { limit: 2 },
                    ttl_ms: 900,
                    wait_ms: 10,
                    lock_delay_ms: 0,
                    keep_place: true,
                },
                answer: Answer::Granted {
                    token: 3,
                    fence: 77,
                    ttl_ms: 900,
                },
                invoked: 5,
                returned: 9,
            },
            Op {
                client: 0,
                name: "b".into(),
                call: Call::Beat {
                    token: 4,
                    ttl_ms: 1000,
                },
                answer: Answer::Lost(Reason::NotOwner),
                invoked: 1,
                returned: 2,
            },
            Op {
                client: 2,
                name: "b".into(),
                call: Call::CheckFence { fence: 8 },
                answer: Answer::Fence {
                    current: true,
                    current_fence: 8,
                },
                invoked: 1,
                returned: 2,
            },
            Op {
                client: 2,
                name: "e".into(),
                call: Call::Leader,
                answer: Answer::Leader {
                    present: true,
                    term: 5,
                },
                invoked: 1,
                returned: 2,
            },
            Op {
                client: 2,
                name: "b".into(),
                call: Call::Wipe,
                answer: Answer::Happened,
                invoked: 1,
                returned: 2,
            },
            Op {
                client: 2,
                name: "b".into(),
                call: Call::ClockStep { delta_ms: -2000 },
                answer: Answer::Happened,
                invoked: 1,
                returned: 2,
            },
            Op {
                client: 2,
                name: "b".into(),
                call: Call::Write {
                    token: 3,
                    fence: 9,
                    believed: true,
                },
                answer: Answer::Refused,
                invoked: 1,
                returned: 2,
            },
        ];
        for op in ops {
            assert_eq!(parse_op(&format_op(&op)).unwrap(), op, "{}", format_op(&op));
        }
        assert!(parse_op("1 a 2 3 | acquire lock | granted").is_err());
    }
}
