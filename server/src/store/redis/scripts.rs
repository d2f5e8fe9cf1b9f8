//! The Lua scripts and the one way to call them.
//!
//! Redis scripts cannot call one another, and Redis Functions (which could
//! share code) need Redis 7: code that several scripts share lives in
//! shared parts (`constants.lua`, `line.lua`, `queue.lua`, `fence.lua`,
//! `renew_lease.lua`) that define only `local function`s and constants and
//! read no KEYS or ARGV, and each script is sent as its declared parts
//! followed by its own body. [`Scripts::new`] declares each script's parts
//! and [`Script::new`] is the one place where they are joined; each
//! script's header names the parts it uses, and the tests below hold both
//! to the names the script calls.
//!
//! Every script runs through [`RedisStore::run`]: EVALSHA (loading the
//! script after a Redis restart), bounded by the store timeout, retried on
//! a broken connection or a migrating Cluster slot, its errors classified,
//! and its reply read into the script's reply type.

use crate::duration::millis;
use std::{
    marker::PhantomData,
    sync::{atomic::Ordering, LazyLock},
    time::Duration,
};

use redis::{ErrorKind, ServerErrorKind, ToRedisArgs, Value};

use super::{
    connect::{classify, timed_out, Conn},
    replies::{decode, Dequeued, Description, LockRenewal, Ranks, Renewal, Renewals, Reply},
    RedisStore,
};
use crate::{
    error::{Error, Result},
    store::{contract::fill, Acquired, Checked, Revocation},
};

/// A shared part: Lua that defines functions and constants for the scripts
/// that include it, and runs nothing itself.
#[derive(Clone, Copy)]
pub(super) struct Part {
    /// Its file name, as script headers name it (read by the tests that
    /// hold the headers to the declared parts, and in errors).
    file: &'static str,
    source: &'static str,
}

/// A shared part of `lua/`, by file name.
macro_rules! part {
    ($file:literal) => {
        Part {
            file: $file,
            source: include_str!(concat!("../lua/", $file)),
        }
    };
}

/// The contract's constants (`__CONSTANTS__`, filled from
/// `store::contract`) and the per-token end records.
const CONSTANTS: Part = part!("constants.lua");
/// The wait line: `prune`, `first_in_line`.
const LINE: Part = part!("line.lua");
/// A waiter's place in the line: `arrive`, `wait_in_line`, `take_turn`.
const QUEUE: Part = part!("queue.lua");
/// The fence of a new grant: `next_fence`.
const FENCE: Part = part!("fence.lua");
/// Renewing a lease: `renew_lock`, `renew_permit`, `renew`.
const RENEW_LEASE: Part = part!("renew_lease.lua");
/// A lock's lease record in either format: `read_lease`, `write_lease`,
/// `update_lease` (`__RECORD_FORMAT__`: the format the broker writes).
const RECORD: Part = part!("record.lua");

/// The format of the lease records a broker writes (`record.lua`): every
/// broker reads both; a broker before format 2 reads only format 1.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum RecordFormat {
    /// A hash of fields, as every broker before format 2 wrote: for a
    /// rolling update from such a broker, until none of them is left.
    V1,
    /// One string, written with its expiry in one command.
    #[default]
    V2,
}

impl RecordFormat {
    /// Its number, as `--redis-record-format` and `record.lua` say it.
    pub fn number(self) -> u8 {
        match self {
            RecordFormat::V1 => 1,
            RecordFormat::V2 => 2,
        }
    }
}

/// A script's text with its placeholders filled: the contract's constants
/// (`store::contract`) and the record format it writes.
fn build(text: &str, format: RecordFormat) -> Result<String, String> {
    fill(
        &text.replace("__RECORD_FORMAT__", &format.number().to_string()),
        &[],
    )
}

/// A script of `lua/`, by file name, built from `parts` (in order) and
/// its own body.
macro_rules! script {
    ($format:expr, $file:literal, [$($part:expr),*]) => {
        Script::new($format, $file, &[$($part),*], include_str!(concat!("../lua/", $file)))
    };
}

/// A script as Redis runs it (its parts, then its body), hashed once;
/// `R` is what its reply reads as.
pub(super) struct Script<R> {
    file: &'static str,
    parts: &'static [Part],
    body: &'static str,
    /// The full text as sent to Redis by `EVALSHA`.
    source: String,
    redis: redis::Script,
    /// Its name as a function of the library: `<library>_<file stem>`
    /// ([`Library`]).
    function: String,
    reply: PhantomData<fn() -> R>,
}

impl<R: Reply> Script<R> {
    fn new(
        format: RecordFormat,
        file: &'static str,
        parts: &'static [Part],
        body: &'static str,
    ) -> Self {
        let joined: String = parts.iter().map(|p| p.source).chain([body]).collect();
        // The files are compiled in; the tests below fill every script, so
        // an unknown placeholder fails them, never a running broker.
        let source = build(&joined, format).unwrap_or_else(|e| panic!("{file}: {e}"));
        Script {
            file,
            parts,
            body,
            redis: redis::Script::new(&source),
            source,
            function: String::new(),
            reply: PhantomData,
        }
    }

    /// A call of this script, for `op` (named in errors and logs), with no
    /// run yet.
    pub fn call(&self, op: &'static str) -> Call<'_, R> {
        Call {
            op,
            script: self,
            runs: Vec::new(),
            asking: false,
            acknowledged: false,
        }
    }
}

/// Every script, each with its reply type.
pub(super) struct Scripts {
    pub acquire: Script<Acquired>,
    pub semaphore_acquire: Script<Acquired>,
    pub renew: Script<Renewal>,
    pub renew_many: Script<Renewals>,
    pub renew_lock: Script<LockRenewal>,
    pub renew_permit: Script<Renewal>,
    pub release: Script<Checked<()>>,
    pub revoke: Script<Revocation>,
    pub dequeue: Script<Dequeued>,
    pub refresh: Script<Ranks>,
    pub describe: Script<Description>,
    /// The same scripts as one function library.
    pub library: Library,
}

impl Scripts {
    fn new(f: RecordFormat) -> Self {
        Scripts {
            acquire: script!(f, "acquire.lua", [CONSTANTS, RECORD, LINE, QUEUE, FENCE]),
            semaphore_acquire: script!(
                f,
                "semaphore_acquire.lua",
                [CONSTANTS, RECORD, LINE, QUEUE, FENCE]
            ),
            renew: script!(f, "renew.lua", [CONSTANTS, RECORD, RENEW_LEASE]),
            renew_many: script!(f, "renew_many.lua", [CONSTANTS, RECORD, RENEW_LEASE]),
            renew_lock: script!(f, "renew_lock.lua", [CONSTANTS, RECORD, RENEW_LEASE]),
            renew_permit: script!(f, "renew_permit.lua", [CONSTANTS, RECORD, RENEW_LEASE]),
            release: script!(f, "release.lua", [CONSTANTS, RECORD, LINE]),
            revoke: script!(f, "revoke.lua", [CONSTANTS, RECORD]),
            dequeue: script!(f, "dequeue.lua", [LINE]),
            refresh: script!(f, "refresh.lua", [CONSTANTS, LINE]),
            describe: script!(f, "describe.lua", [CONSTANTS, RECORD]),
            library: Library::default(),
        }
        .with_library(f)
    }

    /// Itself, with its scripts made into a [`Library`], each script's
    /// function named.
    fn with_library(mut self, format: RecordFormat) -> Self {
        self.library = Library::of(format, &self.all());
        let library = self.library.name.clone();
        for (file, function) in self.functions_mut() {
            *function = Library::function(&library, file);
        }
        self
    }

    /// `(file, function name)` of every script, to name the functions.
    fn functions_mut(&mut self) -> [(&'static str, &mut String); 11] {
        fn entry<R>(s: &mut Script<R>) -> (&'static str, &mut String) {
            (s.file, &mut s.function)
        }
        [
            entry(&mut self.acquire),
            entry(&mut self.renew),
            entry(&mut self.renew_many),
            entry(&mut self.renew_lock),
            entry(&mut self.renew_permit),
            entry(&mut self.release),
            entry(&mut self.revoke),
            entry(&mut self.dequeue),
            entry(&mut self.refresh),
            entry(&mut self.semaphore_acquire),
            entry(&mut self.describe),
        ]
    }

    /// `(file, parts, body, full text)` of every script.
    fn all(&self) -> [(&'static str, &'static [Part], &'static str, &str); 11] {
        fn entry<R: Reply>(s: &Script<R>) -> (&'static str, &'static [Part], &'static str, &str) {
            (s.file, s.parts, s.body, &s.source)
        }
        [
            entry(&self.acquire),
            entry(&self.renew),
            entry(&self.renew_many),
            entry(&self.renew_lock),
            entry(&self.renew_permit),
            entry(&self.release),
            entry(&self.revoke),
            entry(&self.dequeue),
            entry(&self.refresh),
            entry(&self.semaphore_acquire),
            entry(&self.describe),
        ]
    }
}

/// Every script of a record format as one Redis function library (Redis 7
/// and newer), loaded once per Redis and called by `FCALL`: the shared
/// parts run once, when the library is loaded, where a script sent by
/// `EVALSHA` runs its parts' definitions again on every call (a closure for
/// each `local function`: 31 thousand of the 226 thousand Redis
/// instructions of an acquire+release cycle, measured with
/// `bench/scripts/lua-cost.py`). Each function's body is its script's,
/// between `function(KEYS, ARGV)` and `end`, so that it reads its keys and
/// arguments as the script does. Where Redis has no functions (before 7),
/// or its ACL user may not load them, the broker sends the scripts instead
/// ([`RedisStore::run`]).
#[derive(Default)]
pub(super) struct Library {
    /// `leasehold_<12 hex digits of the SHA-1 of its scripts' texts>`:
    /// brokers of another version or record format load theirs beside it
    /// (and their functions, named `<library>_<script>`), never replacing
    /// it.
    name: String,
    /// The text `FUNCTION LOAD` takes.
    source: String,
}

impl Library {
    /// Stands for the library's name in its text until the name, a hash of
    /// that text, is known.
    const NAME: &'static str = "@LIBRARY@";

    /// The library of `scripts`, named after its whole text (every script
    /// as Redis runs it, the contract's constants and the format filled
    /// in, and each function's flags): brokers whose libraries differ in
    /// anything load libraries, and functions, of their own.
    fn of(
        format: RecordFormat,
        scripts: &[(&'static str, &'static [Part], &'static str, &str)],
    ) -> Library {
        let mut text = format!("#!lua name={}\n", Self::NAME);
        // Every part once, each after the parts it uses (the order of
        // `all_parts`, which a test holds to their headers).
        for part in [CONSTANTS, RECORD, LINE, QUEUE, FENCE, RENEW_LEASE] {
            text.push_str(part.source);
        }
        for (file, _, body, _) in scripts {
            text.push_str(&format!(
                "redis.register_function{{function_name = '{}', flags = {{{}}}, \
                 callback = function(KEYS, ARGV)\n{body}\nend}}\n",
                Self::function(Self::NAME, file),
                flags(file),
            ));
        }
        let text = build(&text, format).unwrap_or_else(|e| panic!("the function library: {e}"));
        let name = format!("leasehold_{}", &redis::Script::new(&text).get_hash()[..12]);
        Library {
            source: text.replace(Self::NAME, &name),
            name,
        }
    }

    /// The name of the function of `file` in the library `library`.
    fn function(library: &str, file: &str) -> String {
        format!("{library}_{}", file.trim_end_matches(".lua"))
    }
}

/// The flags a script's function is registered with. A Redis at its
/// `maxmemory` (with `noeviction`, the only policy the broker serves on)
/// refuses every function not flagged `allow-oom` before it runs, where a
/// script sent by `EVALSHA` fails at its first command that may take
/// memory. Grants take memory and are refused there (nothing is written);
/// what keeps or ends a lease is allowed, so that a full Redis does not
/// take the holders' leases away while they renew them, nor hold a
/// released name: a renewal rewrites a record of the same size, a release
/// deletes one and writes a record of a few bytes that expires in 10 s.
/// Describe writes nothing (`no-writes`: a replica may run it too).
fn flags(file: &str) -> &'static str {
    match file {
        "acquire.lua" | "semaphore_acquire.lua" => "",
        "describe.lua" => "'no-writes'",
        "renew.lua" | "renew_many.lua" | "renew_lock.lua" | "renew_permit.lua" | "release.lua"
        | "revoke.lua" | "dequeue.lua" | "refresh.lua" => "'allow-oom'",
        other => panic!("{other}: say which flags its function takes (scripts::flags)"),
    }
}

/// The scripts of a record format, built and hashed once per process.
pub(super) fn scripts(format: RecordFormat) -> &'static Scripts {
    static V1: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(RecordFormat::V1));
    static V2: LazyLock<Scripts> = LazyLock::new(|| Scripts::new(RecordFormat::V2));
    match format {
        RecordFormat::V1 => &V1,
        RecordFormat::V2 => &V2,
    }
}

/// Every script as Redis runs it (its parts and body joined), with its file
/// name, for tests that load each one into a real Redis: those of each
/// record format.
pub static SCRIPTS: LazyLock<Vec<(&'static str, &'static str)>> = LazyLock::new(|| {
    [RecordFormat::V1, RecordFormat::V2]
        .into_iter()
        .flat_map(|format| scripts(format).all())
        .map(|(file, _, _, source)| (file, source))
        .collect()
});

/// `constants.lua` as every script that includes it begins: the
/// contract's constants filled in (for the test that reads them back from
/// a real Redis).
pub static SCRIPT_CONSTANTS: LazyLock<String> = LazyLock::new(|| {
    fill(CONSTANTS.source, &[]).unwrap_or_else(|e| panic!("{}: {e}", CONSTANTS.file))
});

/// A run's KEYS and ARGV, each argument encoded as Redis takes it.
type Run = (Vec<Vec<u8>>, Vec<Vec<u8>>);

/// One call of a script: one or more runs, sent in one write.
pub(super) struct Call<'s, R> {
    op: &'static str,
    script: &'s Script<R>,
    /// Each run's KEYS and ARGV, encoded.
    runs: Vec<Run>,
    asking: bool,
    acknowledged: bool,
}

impl<'s, R: Reply> Call<'s, R> {
    /// Adds a run with these KEYS and ARGV.
    pub fn run(mut self, keys: &[impl ToRedisArgs], args: &[impl ToRedisArgs]) -> Self {
        fn encode(items: &[impl ToRedisArgs]) -> Vec<Vec<u8>> {
            items.iter().flat_map(ToRedisArgs::to_redis_args).collect()
        }
        self.runs.push((encode(keys), encode(args)));
        self
    }

    /// Sends `ASKING` first, in the same write: where the key has moved to
    /// a Cluster node importing its slot, that node serves the script only
    /// right after an `ASKING` on the same connection. redis-rs sends its
    /// own `ASKING` when it follows an ASK, but as a request of its own:
    /// with many calls redirected at once on the shared connection,
    /// another's script can come between and use it up, and the script is
    /// then refused (MOVED). Elsewhere `ASKING` is a no-op.
    pub fn asking(mut self) -> Self {
        self.asking = true;
        self
    }

    /// A grant or renewal: followed by `WAIT` when replicas must
    /// acknowledge (`--replica-acks`), on the same connection (WAIT counts
    /// the writes of its own connection).
    pub fn acknowledged(mut self) -> Self {
        self.acknowledged = true;
        self
    }
}

/// The replies of a call's runs, in order, and whether enough replicas
/// acknowledged them.
pub(super) struct Ran<R> {
    pub replies: Vec<R>,
    /// UNAVAILABLE when a `WAIT` found too few replicas acknowledging: the
    /// write is done on the primary, and a failover could undo it.
    pub acks: Result<()>,
}

impl<R> Ran<R> {
    /// The replies, once enough replicas acknowledged them.
    pub fn acknowledged(self) -> Result<Vec<R>> {
        self.acks?;
        Ok(self.replies)
    }
}

/// The one reply of a call of one run.
pub(super) fn only<R>(op: &str, replies: Vec<R>) -> Result<R> {
    let n = replies.len();
    let mut replies = replies.into_iter();
    match (replies.next(), replies.next()) {
        (Some(reply), None) => Ok(reply),
        _ => Err(Error::Internal(format!("{op}: {n} replies to one run"))),
    }
}

/// First and longest pause before an attempt refused with TRYAGAIN is made
/// again (see [`RedisStore::retrying`]).
const TRYAGAIN_PAUSE_MIN: Duration = Duration::from_millis(10);
const TRYAGAIN_PAUSE_MAX: Duration = Duration::from_millis(100);

impl RedisStore {
    /// Calls a script: the one path every script takes. One run alone is
    /// one `EVALSHA`; several runs, an `ASKING` or a `WAIT` make a
    /// pipeline, sent in one write. A script Redis does not know (it
    /// restarted) is loaded and the call sent again. The whole is bounded
    /// by the store timeout ([`RedisStore::retrying`]); each run's reply is
    /// read as the script's reply type.
    pub(super) async fn run<R: Reply>(&self, call: Call<'_, R>) -> Result<Ran<R>> {
        let Call {
            op,
            script,
            runs,
            asking,
            acknowledged,
        } = call;
        let replicas = if acknowledged {
            self.inner.replica_acks
        } else {
            0
        };
        // The runs as `FCALL`s of the library's functions, or as `EVALSHA`s
        // of the scripts.
        let pipeline = |functions: bool| {
            let mut pipe = redis::pipe();
            if asking {
                pipe.cmd("ASKING").ignore();
            }
            for (keys, args) in &runs {
                let command = if functions {
                    pipe.cmd("FCALL").arg(&script.function)
                } else {
                    pipe.cmd("EVALSHA").arg(script.redis.get_hash())
                };
                command.arg(keys.len()).arg(keys).arg(args);
            }
            if replicas > 0 {
                pipe.cmd("WAIT")
                    .arg(replicas)
                    .arg(millis(self.inner.replica_ack_timeout));
            }
            pipe
        };
        let library = &scripts(self.inner.record_format).library;
        let calls = &self
            .inner
            .functions
            .load(Ordering::Relaxed)
            .then(|| pipeline(true));
        let pipeline = &pipeline;
        let mut values = self
            .retrying(op, |mut conn| async move {
                if let Some(calls) = calls
                    .as_ref()
                    .filter(|_| self.inner.functions.load(Ordering::Relaxed))
                {
                    let sent = match send(calls, &mut conn).await {
                        Err(e) if function_missing(&e) => {
                            match load_library(library, &mut conn).await {
                                Ok(()) => send(calls, &mut conn).await,
                                Err(e) => Err(e),
                            }
                        }
                        other => other,
                    };
                    match sent {
                        Err(e) if functions_refused(&e) => self.without_functions(&e),
                        other => return other,
                    }
                }
                let scripts = pipeline(false);
                match send(&scripts, &mut conn).await {
                    Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                        script.redis.load_async(&mut conn).await?;
                        send(&scripts, &mut conn).await
                    }
                    other => other,
                }
            })
            .await?;
        let acks = if replicas > 0 {
            match values.pop() {
                Some(Value::Int(acks)) => self.check_acks(acks),
                other => return Err(Error::Internal(format!("WAIT reply: {other:?}"))),
            }
        } else {
            Ok(())
        };
        if values.len() != runs.len() {
            return Err(Error::Internal(format!(
                "{op}: {} replies to {} runs of {}",
                values.len(),
                runs.len(),
                script.file
            )));
        }
        let replies = values
            .into_iter()
            .map(|value| decode(script.file, value))
            .collect::<Result<_>>()?;
        Ok(Ran { replies, acks })
    }

    /// Runs `attempt` within the store timeout. An attempt whose connection
    /// turns out to be broken (Redis restarted, a proxy dropped it) is made
    /// once more on the new connection: every script is safe to repeat with
    /// the same arguments. An attempt refused with TRYAGAIN (a Redis
    /// Cluster slot migrating: a script whose keys are partly on either
    /// node; nothing ran) is made again after a short pause until the store
    /// timeout, since migrating a slot's keys takes longer than redis-rs'
    /// own few retries.
    async fn retrying<T, F, Fut>(&self, op: &'static str, mut attempt: F) -> Result<T>
    where
        F: FnMut(Conn) -> Fut,
        Fut: std::future::Future<Output = redis::RedisResult<T>>,
    {
        let deadline = tokio::time::Instant::now() + self.inner.timeout;
        let mut broken = false;
        let mut pause = TRYAGAIN_PAUSE_MIN;
        loop {
            match tokio::time::timeout_at(deadline, attempt(self.conn()?)).await {
                Ok(Ok(value)) => return Ok(value),
                Ok(Err(e)) if !broken && (e.is_connection_dropped() || e.is_io_error()) => {
                    self.suspect(&e);
                    tracing::debug!(op, error = %e, "Redis connection broken; retrying once");
                    broken = true;
                }
                Ok(Err(e)) if e.kind() == ErrorKind::Server(ServerErrorKind::TryAgain) => {
                    if tokio::time::Instant::now() + pause >= deadline {
                        return Err(Error::Unavailable(format!(
                            "Redis Cluster refused {op} with TRYAGAIN for {} ms (the store \
                             timeout): its slot is migrating; retry",
                            self.inner.timeout.as_millis()
                        )));
                    }
                    tracing::debug!(op, "slot migrating (TRYAGAIN); retrying");
                    tokio::time::sleep(pause).await;
                    pause = (pause * 2).min(TRYAGAIN_PAUSE_MAX);
                }
                Ok(Err(e)) => {
                    self.suspect(&e);
                    return Err(
                        if broken && (e.is_connection_dropped() || e.is_io_error()) {
                            Error::Unavailable(format!("Redis connection broken twice during {op}"))
                        } else {
                            classify(op, e)
                        },
                    );
                }
                Err(_) => {
                    self.inner.follow.notify_one();
                    return Err(timed_out(op, self.inner.timeout));
                }
            }
        }
    }

    /// Turns to `EVALSHA` for good, after Redis refused functions with
    /// `e` (logged once: the scripts cost Redis more per call).
    fn without_functions(&self, e: &redis::RedisError) {
        if self.inner.functions.swap(false, Ordering::Relaxed) {
            tracing::warn!(
                error = %e,
                "this Redis runs no functions for Leasehold (Redis before 7, or an ACL user \
                 without FUNCTION and FCALL): sending scripts (EVALSHA) instead, which cost \
                 Redis about an eighth more per acquire and release"
            );
        }
    }

    /// UNAVAILABLE unless `acks` replicas acknowledged.
    fn check_acks(&self, acks: i64) -> Result<()> {
        if acks >= i64::from(self.inner.replica_acks) {
            return Ok(());
        }
        Err(Error::Unavailable(format!(
            "only {acks} of the {} Redis replicas required (--replica-acks) acknowledged the write \
             within {} ms; not granted or renewed, so that a failover cannot undo it",
            self.inner.replica_acks,
            self.inner.replica_ack_timeout.as_millis()
        )))
    }
}

/// Whether `e` says Redis has no function of that name: it restarted
/// without persistence, or never had the library (a new node, a new
/// version).
fn function_missing(e: &redis::RedisError) -> bool {
    // Read from the text: in a pipeline (an `FCALL` and a `WAIT`), the
    // error is the pipeline's, which names the run's.
    e.to_string().contains("Function not found")
}

/// Whether `e` says this Redis will not run functions for us: before Redis
/// 7 (`unknown command`), or an ACL user without `FCALL` or `FUNCTION`
/// (NOPERM).
fn functions_refused(e: &redis::RedisError) -> bool {
    let text = e.to_string();
    e.kind() == ErrorKind::Server(ServerErrorKind::NoPerm)
        || text.contains("NOPERM")
        || text.contains("unknown command")
}

/// Loads `library` (`FUNCTION LOAD REPLACE`: every broker of this version
/// loads the same text under the same name, so replacing it is harmless;
/// on a Cluster, on every primary).
async fn load_library(library: &Library, conn: &mut Conn) -> redis::RedisResult<()> {
    redis::cmd("FUNCTION")
        .arg("LOAD")
        .arg("REPLACE")
        .arg(&library.source)
        .query_async::<Value>(conn)
        .await?;
    tracing::info!(library = %library.name, "loaded the Lua function library into Redis");
    Ok(())
}

/// Sends `pipe`: a lone command as itself (a script run alone is the
/// `EVALSHA` redis-rs would send, routed and redirected as a command on a
/// Cluster), anything more as a pipeline.
async fn send(pipe: &redis::Pipeline, conn: &mut Conn) -> redis::RedisResult<Vec<Value>> {
    let mut commands = pipe.cmd_iter();
    match (commands.next(), commands.next()) {
        (Some(only), None) => Ok(vec![only.query_async(conn).await?]),
        _ => pipe.query_async(conn).await,
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;

    use super::*;
    use crate::store::contract;

    /// The Lua text without its comments.
    fn code(lua: &str) -> String {
        lua.lines()
            .map(|line| line.split("--").next().unwrap_or(""))
            .collect::<Vec<_>>()
            .join("\n")
    }

    /// The identifiers in a Lua text's code.
    fn identifiers(lua: &str) -> BTreeSet<String> {
        code(lua)
            .split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
            .filter(|w| w.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_'))
            .map(str::to_owned)
            .collect()
    }

    /// What a part defines: its top-level `local function NAME` and
    /// `local NAME =`.
    fn defined(part: &Part) -> BTreeSet<String> {
        code(&filled(part))
            .lines()
            .filter_map(|line| {
                let rest = line.strip_prefix("local ")?;
                let rest = rest.strip_prefix("function ").unwrap_or(rest);
                rest.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_'))
                    .next()
                    .map(str::to_owned)
            })
            .collect()
    }

    /// The `.lua` files a header's `-- <label>:` line names.
    fn header_files(lua: &str, label: &str) -> Option<Vec<String>> {
        let line = lua
            .lines()
            .take_while(|l| l.starts_with("--"))
            .find_map(|l| l.strip_prefix(&format!("-- {label}:")))?;
        Some(
            line.split(|c: char| c == ',' || c.is_whitespace())
                .map(|w| w.trim_end_matches('.'))
                .filter(|w| w.ends_with(".lua"))
                .map(str::to_owned)
                .collect(),
        )
    }

    /// A part's text as scripts include it: its placeholders filled.
    fn filled(part: &Part) -> String {
        build(part.source, RecordFormat::V2).unwrap()
    }

    fn all_parts() -> [Part; 6] {
        [CONSTANTS, RECORD, LINE, QUEUE, FENCE, RENEW_LEASE]
    }

    /// A script (or a part) that calls a shared function, or reads a shared
    /// constant, includes the part that defines it, before it: otherwise
    /// Lua would find a nil global at run time, on the first request that
    /// takes that branch.
    #[test]
    fn every_shared_name_a_script_uses_comes_from_a_part_it_includes() {
        let shared: BTreeSet<String> = all_parts().iter().flat_map(defined).collect();
        assert!(shared.contains("take_turn") && shared.contains("LINGER_MS"));
        assert!(shared.contains("LEASE_EXPIRED_REPORTED") && shared.contains("GRANT_QUEUE"));
        for (file, parts, body, _) in scripts(RecordFormat::V2).all() {
            let mut known = BTreeSet::new();
            let texts = parts.iter().map(|p| (p.file, filled(p), defined(p)));
            for (what, text, mine) in texts.chain([(file, body.to_owned(), BTreeSet::new())]) {
                for name in identifiers(&text).intersection(&shared) {
                    assert!(
                        known.contains(name) || mine.contains(name),
                        "{file}: {what} uses {name}, which no part before it defines"
                    );
                }
                known.extend(mine);
            }
        }
    }

    /// A shared part takes everything through its functions' parameters:
    /// it reads no KEYS or ARGV (which would tie it to the argument order
    /// of the scripts that include it), and at its top level only defines
    /// (`local`, and the `end` of a function), running nothing.
    #[test]
    fn shared_parts_read_no_keys_or_argv_and_only_define() {
        for part in all_parts() {
            let names = identifiers(part.source);
            assert!(
                !names.contains("KEYS") && !names.contains("ARGV"),
                "{} reads KEYS or ARGV",
                part.file
            );
            for line in code(&filled(&part)).lines() {
                let top = !line.starts_with(char::is_whitespace) && !line.trim().is_empty();
                assert!(
                    !top || line.starts_with("local ") || line == "end",
                    "{} runs code at its top level: {line}",
                    part.file
                );
                assert!(
                    !(line.starts_with("local ") && line.contains("redis.call")),
                    "{} calls Redis at its top level: {line}",
                    part.file
                );
            }
        }
    }

    /// Headers tell the truth: each script's `Uses:` line names exactly the
    /// parts it is built from, in order, and each part's `Defines:` line
    /// names what it defines.
    #[test]
    fn headers_name_the_parts_used_and_the_names_defined() {
        for (file, parts, body, _) in scripts(RecordFormat::V2).all() {
            let declared: Vec<String> = parts.iter().map(|p| p.file.to_owned()).collect();
            let named = header_files(body, "Uses").unwrap_or_default();
            assert_eq!(named, declared, "{file}'s header: Uses");
        }
        for part in all_parts() {
            let uses = identifiers(part.source);
            let needed: Vec<String> = all_parts()
                .iter()
                .filter(|p| p.file != part.file && !defined(p).is_disjoint(&uses))
                .map(|p| p.file.to_owned())
                .collect();
            let named = header_files(part.source, "Uses").unwrap_or_default();
            assert_eq!(named, needed, "{}'s header: Uses", part.file);
            let header: String = part
                .source
                .lines()
                .take_while(|l| l.starts_with("--"))
                .skip_while(|l| !l.starts_with("-- Defines:"))
                .take_while(|l| *l != "--")
                .collect::<Vec<_>>()
                .join(" ");
            // The contract's constants are declared (and described) in
            // contract.rs; the header names them by family.
            let constants = contract::ALL.iter().map(|(name, _)| *name);
            for name in defined(&part)
                .into_iter()
                .filter(|name| !constants.clone().any(|c| c == name))
            {
                assert!(
                    header.contains(&name),
                    "{}'s Defines line does not name {name}",
                    part.file
                );
            }
        }
    }

    /// Each script is its parts and its body, nothing else: what Redis runs
    /// is what the files say.
    #[test]
    fn scripts_are_their_parts_then_their_body() {
        for format in [RecordFormat::V1, RecordFormat::V2] {
            for (file, parts, body, source) in scripts(format).all() {
                let joined: String = parts.iter().map(|p| p.source).chain([body]).collect();
                assert_eq!(source, build(&joined, format).unwrap(), "{file}");
                for placeholder in ["__CONSTANTS__", "__RECORD_FORMAT__"] {
                    assert!(!source.contains(placeholder), "{file}: {placeholder} left");
                }
            }
        }
        assert_eq!(SCRIPTS.len(), 22);
    }
}
