//! A real PostgreSQL server for the tests: Debian's PostgreSQL (initdb and
//! postgres from `/usr/lib/postgresql/<version>/bin`, or
//! `$LEASEHOLD_PG_BIN`), its cluster in a temporary folder, listening on a
//! free loopback port only (its Unix socket in that folder), trust
//! authentication for user `postgres`. PostgreSQL refuses to run as root:
//! when the tests are root (CI), initdb and postgres run as the `postgres`
//! system user (the Debian package creates it) and the folder is theirs.
//!
//! A server can have a streaming standby (pg_basebackup, psql and pg_ctl
//! from the same folder), synchronous or not, to promote in its place.
//!
//! initdb takes a second or two (several on a loaded machine), and every
//! test runs in a process of its own (`cargo nextest`), so it runs once per
//! machine into a template cluster kept in the temporary directory, made
//! under a [`FileLock`] by the first test that needs it; every server copies
//! the template (a few MB).

use std::{
    os::unix::process::CommandExt,
    path::{Path, PathBuf},
    process::{Child, Command, Stdio},
    sync::OnceLock,
    time::Duration,
};

use crate::{free_port, lock::FileLock};

/// The folder of initdb and postgres: `$LEASEHOLD_PG_BIN`, else the newest
/// `/usr/lib/postgresql/*/bin` (Debian's layout; `scripts/test` installs
/// the `postgresql` package).
fn pg_bin() -> PathBuf {
    if let Some(dir) = std::env::var_os("LEASEHOLD_PG_BIN") {
        return dir.into();
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse().ok()?;
            let bin = e.path().join("bin");
            bin.join("postgres").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, bin)| bin).unwrap_or_else(|| {
        panic!(
            "no PostgreSQL under /usr/lib/postgresql: install Debian's postgresql package \
             (scripts/test does) or set LEASEHOLD_PG_BIN"
        )
    })
}

/// The user and group to run PostgreSQL as: `None` when not root (it runs
/// as us), else the `postgres` system user's.
fn run_as() -> Option<(u32, u32)> {
    // SAFETY: geteuid has no preconditions.
    if unsafe { libc::geteuid() } != 0 {
        return None;
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam gets a valid C string; the record it returns is read
    // at once, before any other call could reuse it.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    assert!(
        !pw.is_null(),
        "running as root, and PostgreSQL refuses root: no `postgres` user to run it as \
         (Debian's postgresql package creates it)"
    );
    // SAFETY: checked non-null above.
    Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) })
}

/// A command run as [`run_as`]'s user.
fn command(program: &Path) -> Command {
    let mut command = Command::new(program);
    if let Some((uid, gid)) = run_as() {
        command.uid(uid).gid(gid);
        // Debian's postgres user's home; PostgreSQL reads nothing there.
        command.env("HOME", "/var/lib/postgresql");
    }
    command
}

/// Gives `dir` (and what is in it) to [`run_as`]'s user.
fn chown(dir: &Path) {
    if let Some((uid, gid)) = run_as() {
        let status = Command::new("chown")
            .arg("-R")
            .arg(format!("{uid}:{gid}"))
            .arg(dir)
            .status()
            .expect("run chown");
        assert!(status.success(), "chown {} failed", dir.display());
    }
}

fn temp_dir(what: &str) -> PathBuf {
    let dir = std::env::temp_dir().join(format!(
        "leasehold-pg-{what}-{}-{}",
        std::process::id(),
        free_port()
    ));
    std::fs::create_dir_all(&dir).expect("a temporary directory");
    dir
}

/// The application_name a standby of [`PostgresServer::start_standby`]
/// streams under: the name a synchronous primary waits for.
pub const STANDBY_NAME: &str = "leasehold_standby";

static TEMPLATE: OnceLock<PathBuf> = OnceLock::new();

/// How the template is made: part of its key, so that a change here makes
/// a new template rather than reusing one made the old way.
const INITDB_ARGS: [&str; 7] = [
    "-U",
    "postgres",
    "--auth=trust",
    "-E",
    "UTF8",
    "--no-sync",
    "--no-instructions",
];

/// The template cluster, made once per machine (per user and PostgreSQL
/// build): `leasehold-pg-template-<uid>-<key>/data` in the temporary
/// directory, the key naming the `postgres` binary, its modification time
/// and [`INITDB_ARGS`], so that an upgraded PostgreSQL gets a template of
/// its own. Made in a folder of its own and renamed into place under a
/// [`FileLock`], so that a test never copies a half-made template, and a
/// run killed half-way leaves nothing that a later one would take for a
/// template. Kept between runs, as a cache: delete it at will.
fn template() -> &'static Path {
    TEMPLATE.get_or_init(|| {
        let postgres = pg_bin().join("postgres");
        let modified = std::fs::metadata(&postgres)
            .and_then(|m| m.modified())
            .ok()
            .and_then(|t| t.duration_since(std::time::UNIX_EPOCH).ok())
            .map_or(0, |d| d.as_secs());
        let mut key = std::collections::hash_map::DefaultHasher::new();
        std::hash::Hash::hash(&(postgres.as_os_str(), modified, INITDB_ARGS), &mut key);
        // SAFETY: geteuid has no preconditions.
        let uid = unsafe { libc::geteuid() };
        let name = format!(
            "leasehold-pg-template-{uid}-{:016x}",
            std::hash::Hasher::finish(&key)
        );
        let dir = std::env::temp_dir().join(&name);
        let data = dir.join("data");
        let _lock = FileLock::acquire(&name);
        if data.join("PG_VERSION").exists() {
            return data;
        }
        let making = temp_dir("template");
        chown(&making);
        let output = command(&pg_bin().join("initdb"))
            .arg("-D")
            .arg(making.join("data"))
            .args(INITDB_ARGS)
            .output()
            .expect("run initdb");
        assert!(
            output.status.success(),
            "initdb failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::rename(&making, &dir)
            .unwrap_or_else(|e| panic!("rename {} to {}: {e}", making.display(), dir.display()));
        data
    })
}

/// A PostgreSQL server, stopped (SIGQUIT, then SIGKILL) on drop and its
/// folder removed.
pub struct PostgresServer {
    port: u16,
    dir: PathBuf,
    child: Option<Child>,
    fsync: bool,
    /// More `-c name=value` settings.
    settings: Vec<String>,
    /// For a server under libfaketime: the file holding its clock's offset.
    clock: Option<PathBuf>,
}

impl PostgresServer {
    /// A fresh server (empty database `postgres`) on a free loopback port,
    /// fsync off (its data may not survive a crash of the machine; a kill
    /// of the server is fine).
    pub fn start() -> Self {
        Self::start_with(false)
    }

    /// A server that writes its data durably (fsync on), for tests that
    /// restart it and expect the data back.
    pub fn start_durable() -> Self {
        Self::start_with(true)
    }

    /// A durable server ([`PostgresServer::start_durable`]) with more
    /// settings (`name=value`, as `postgres -c` takes them): a server
    /// configured as a deployment might be (`synchronous_commit=off`...).
    pub fn start_durable_with(settings: &[&str]) -> Self {
        let settings = settings.iter().map(|s| (*s).to_owned()).collect();
        Self::start_in(temp_dir("server"), true, settings, None)
    }

    /// A server that accepts TLS connections only (`hostssl` in its
    /// pg_hba.conf, trust within TLS), with this certificate and key (PEM).
    pub fn start_tls(cert: &str, key: &str) -> Self {
        let dir = temp_dir("server");
        let write = |name: &str, text: &str| {
            let path = dir.join(name);
            std::fs::write(&path, text).expect("write a TLS file");
            std::fs::set_permissions(&path, std::os::unix::fs::PermissionsExt::from_mode(0o600))
                .expect("chmod a TLS file");
            path.to_string_lossy().into_owned()
        };
        let settings = vec![
            "ssl=on".to_owned(),
            format!("ssl_cert_file={}", write("server.crt", cert)),
            format!("ssl_key_file={}", write("server.key", key)),
            format!(
                "hba_file={}",
                write("pg_hba.conf", "hostssl all all 127.0.0.1/32 trust\n")
            ),
        ];
        Self::start_in(dir, false, settings, None)
    }

    fn start_with(fsync: bool) -> Self {
        Self::start_in(temp_dir("server"), fsync, Vec::new(), None)
    }

    /// A server under libfaketime, its clock right for now: step it with
    /// [`PostgresServer::set_clock_offset`] while it runs (as NTP stepping
    /// the host's clock would). clock_timestamp() reads the wall clock,
    /// which moves; the monotonic clock is left alone (see the harness's
    /// `faketime_env`).
    pub fn start_faketime() -> Self {
        let dir = temp_dir("server");
        let clock = dir.join("clock");
        std::fs::write(&clock, "+0\n").expect("write the faketime file");
        Self::start_in(dir, false, Vec::new(), Some(clock))
    }

    /// A durable server (as [`PostgresServer::start_durable`]) whose clock
    /// can be stepped (as [`PostgresServer::start_faketime`]), listening on
    /// `ips` besides 127.0.0.1 and trusting clients from 10.0.0.0/8 (the
    /// network namespaces of the tests' own, `netns.rs`): the model
    /// checker's.
    pub fn start_for_model(ips: &[std::net::IpAddr]) -> Self {
        let dir = temp_dir("server");
        let clock = dir.join("clock");
        std::fs::write(&clock, "+0\n").expect("write the faketime file");
        let mut settings = Vec::new();
        if !ips.is_empty() {
            let extra: Vec<String> = ips.iter().map(ToString::to_string).collect();
            settings.push(format!("listen_addresses=127.0.0.1,{}", extra.join(",")));
        }
        Self::copy_template(&dir);
        if !ips.is_empty() {
            use std::io::Write as _;
            let mut hba = std::fs::OpenOptions::new()
                .append(true)
                .open(dir.join("data/pg_hba.conf"))
                .expect("the template's pg_hba.conf");
            writeln!(hba, "host all all 10.0.0.0/8 trust").expect("write pg_hba.conf");
        }
        Self::run_in(dir, true, settings, Some(clock))
    }

    /// Sets the server's clock to `seconds` from the true time (negative:
    /// behind), at once. Only for a server from
    /// [`PostgresServer::start_faketime`].
    pub fn set_clock_offset(&self, seconds: i64) {
        let clock = self
            .clock
            .as_ref()
            .expect("set_clock_offset needs PostgresServer::start_faketime");
        crate::write_clock_offset(clock, seconds);
    }

    fn start_in(dir: PathBuf, fsync: bool, settings: Vec<String>, clock: Option<PathBuf>) -> Self {
        Self::copy_template(&dir);
        Self::run_in(dir, fsync, settings, clock)
    }

    /// The template cluster copied into `dir/data`, owned by the server's
    /// user.
    fn copy_template(dir: &Path) {
        let status = Command::new("cp")
            .arg("-a")
            .arg(template())
            .arg(dir.join("data"))
            .status()
            .expect("run cp");
        assert!(status.success(), "copying the template cluster failed");
        chown(dir);
    }

    /// Runs the cluster in `dir/data` on a free port.
    fn run_in(dir: PathBuf, fsync: bool, settings: Vec<String>, clock: Option<PathBuf>) -> Self {
        let mut server = PostgresServer {
            port: 0,
            dir,
            child: None,
            fsync,
            settings,
            clock,
        };
        for _ in 0..5 {
            server.port = free_port();
            if let Some(child) = server.spawn() {
                server.child = Some(child);
                return server;
            }
        }
        panic!("postgres did not start on any of 5 free ports");
    }

    /// Runs postgres on `self.port` and waits until it accepts connections;
    /// `None` if it exited first (the port was taken).
    fn spawn(&self) -> Option<Child> {
        let mut command = command(&pg_bin().join("postgres"));
        if let Some(clock) = &self.clock {
            command.envs(crate::faketime_env(clock));
        }
        let mut child = command
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(["-p", &self.port.to_string()])
            .args(["-c", "listen_addresses=127.0.0.1"])
            .arg("-c")
            .arg(format!("unix_socket_directories={}", self.dir.display()))
            .args(["-c", if self.fsync { "fsync=on" } else { "fsync=off" }])
            .args(["-c", "max_connections=200"])
            .args(self.settings.iter().flat_map(|s| ["-c", s.as_str()]))
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap_or_else(|e| panic!("cannot run postgres ({e})"));
        let stderr = child.stderr.take().expect("piped stderr");
        // "... read-only connections" for a standby.
        crate::ready_when(
            child,
            stderr,
            "database system is ready to accept",
            Duration::from_secs(30),
        )
    }

    /// The port it listens on.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `postgres://postgres@127.0.0.1:PORT/postgres`.
    pub fn url(&self) -> String {
        format!("postgres://postgres@127.0.0.1:{}/postgres", self.port)
    }

    /// A hot standby of this server, streaming its WAL, once it streams: a
    /// base backup (pg_basebackup -R: `standby.signal`, and
    /// `primary_conninfo` with the application_name [`STANDBY_NAME`]) run
    /// on a free port. The template's pg_hba.conf lets 127.0.0.1 replicate
    /// (trust), and wal_level=replica and max_wal_senders are PostgreSQL's
    /// defaults. `synchronous`: this server then names the standby in
    /// synchronous_standby_names (synchronous_commit is on by default), so
    /// that a commit is acknowledged only once the standby has it: nothing
    /// acknowledged is lost when the standby is promoted. Set after the
    /// backup, so that the standby, promoted, waits for no standby of its
    /// own. One standby per server.
    pub async fn start_standby(&self, synchronous: bool) -> Self {
        let dir = temp_dir("standby");
        chown(&dir);
        let conninfo = format!(
            "host=127.0.0.1 port={} user=postgres application_name={STANDBY_NAME}",
            self.port
        );
        let output = tokio::process::Command::from(command(&pg_bin().join("pg_basebackup")))
            .arg("-D")
            .arg(dir.join("data"))
            .args(["-d", &conninfo, "-R", "-X", "stream", "--checkpoint=fast"])
            .arg("--no-sync")
            .output()
            .await
            .expect("run pg_basebackup");
        assert!(
            output.status.success(),
            "pg_basebackup failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        let standby = Self::run_in(dir, self.fsync, Vec::new(), None);
        let state = format!(
            "SELECT sync_state FROM pg_stat_replication \
             WHERE application_name = '{STANDBY_NAME}' AND state = 'streaming'"
        );
        crate::eventually(Duration::from_secs(60), "the standby to stream", || async {
            !self.psql(&[&state]).await.is_empty()
        })
        .await;
        if synchronous {
            self.psql(&[
                &format!("ALTER SYSTEM SET synchronous_standby_names = '{STANDBY_NAME}'"),
                "SELECT pg_reload_conf()",
            ])
            .await;
            crate::eventually(
                Duration::from_secs(60),
                "the standby to be synchronous",
                || async { self.psql(&[&state]).await == "sync" },
            )
            .await;
        }
        standby
    }

    /// Promotes this standby (pg_ctl promote) and waits until it accepts
    /// writes (pg_is_in_recovery() false).
    pub async fn promote(&self) {
        let output = tokio::process::Command::from(command(&pg_bin().join("pg_ctl")))
            .args(["promote", "--no-wait", "-D"])
            .arg(self.dir.join("data"))
            .output()
            .await
            .expect("run pg_ctl promote");
        assert!(
            output.status.success(),
            "pg_ctl promote failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        crate::eventually(
            Duration::from_secs(60),
            "the promoted standby to accept writes",
            || async { self.psql(&["SELECT pg_is_in_recovery()"]).await == "f" },
        )
        .await;
    }

    /// What psql prints (unaligned, no headers) running `statements` on
    /// this server as `postgres`, each on its own (ALTER SYSTEM may not run
    /// in a transaction block).
    pub async fn psql(&self, statements: &[&str]) -> String {
        let mut psql = tokio::process::Command::from(command(&pg_bin().join("psql")));
        psql.args([
            "-X",
            "-A",
            "-t",
            "-q",
            "-v",
            "ON_ERROR_STOP=1",
            "-h",
            "127.0.0.1",
        ])
        .args([
            "-p",
            &self.port.to_string(),
            "-U",
            "postgres",
            "-d",
            "postgres",
        ]);
        for statement in statements {
            psql.args(["-c", statement]);
        }
        let output = psql.output().await.expect("run psql");
        assert!(
            output.status.success(),
            "psql {statements:?} failed: {}",
            String::from_utf8_lossy(&output.stderr)
        );
        String::from_utf8_lossy(&output.stdout).trim().to_owned()
    }

    /// Stops the server at once (SIGQUIT: an immediate shutdown, like a
    /// crash: the next start recovers from the log), and waits for it.
    pub fn stop(&mut self) {
        if let Some(mut child) = self.child.take() {
            // SAFETY: kill with a pid we own and a valid signal.
            unsafe { libc::kill(crate::as_pid(child.id()), libc::SIGQUIT) };
            for _ in 0..100 {
                if let Ok(Some(_)) = child.try_wait() {
                    return;
                }
                std::thread::sleep(Duration::from_millis(50));
            }
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// Stops the server and starts it again on the same port, with its
    /// data.
    pub fn restart(&mut self) {
        self.stop();
        for _ in 0..50 {
            if let Some(child) = self.spawn() {
                self.child = Some(child);
                return;
            }
            // The port can linger briefly after the stop.
            std::thread::sleep(Duration::from_millis(100));
        }
        panic!("postgres did not restart on port {}", self.port);
    }
}

impl Drop for PostgresServer {
    fn drop(&mut self) {
        self.stop();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
