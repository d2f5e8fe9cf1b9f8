//! A real etcd for the etcd store's tests and for the tests that compare
//! the broker with it (the load generator's `--etcd`): Debian's
//! etcd-server (`etcd` on the PATH, or `$LEASEHOLD_ETCD`), one member
//! listening on free loopback ports (client and peer), its data in a
//! temporary folder removed on drop.
//!
//! Its heartbeat and election timeout are a tenth of etcd's defaults
//! (10 ms, 100 ms): the shortest lease etcd grants is
//! `ceil(1.5 x election timeout)` rounded up to a whole second, 1 s here
//! instead of 2 s, so that the conformance suite's short leases stay
//! short. One member never holds an election after its first.

use std::{
    path::PathBuf,
    process::{Child, Command, Stdio},
    time::Duration,
};

use crate::free_port;

/// The etcd binary: `$LEASEHOLD_ETCD`, or `etcd` on the PATH.
fn etcd_binary() -> String {
    std::env::var("LEASEHOLD_ETCD").unwrap_or_else(|_| "etcd".into())
}

/// A one-member etcd, killed on drop.
pub struct EtcdServer {
    port: u16,
    peer: u16,
    dir: PathBuf,
    child: Child,
}

impl EtcdServer {
    /// Starts etcd on free loopback ports and waits until it serves clients.
    pub fn start() -> Self {
        for _ in 0..5 {
            let (port, peer) = (free_port(), free_port());
            let dir =
                std::env::temp_dir().join(format!("leasehold-etcd-{}-{port}", std::process::id()));
            if let Some(child) = spawn(port, peer, &dir) {
                return EtcdServer {
                    port,
                    peer,
                    dir,
                    child,
                };
            }
            let _ = std::fs::remove_dir_all(&dir);
        }
        panic!("etcd did not start on any of 5 pairs of free ports");
    }

    /// The port clients connect to.
    pub fn port(&self) -> u16 {
        self.port
    }

    /// `http://127.0.0.1:PORT`.
    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// `etcd://127.0.0.1:PORT`: the broker's `--store`.
    pub fn store_url(&self) -> String {
        format!("etcd://127.0.0.1:{}", self.port)
    }

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Kills it (SIGKILL) and starts it again on the same ports with its
    /// data: what it had written to its log survives.
    pub fn restart(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        self.child = self.respawn();
    }

    /// Kills it and starts it again on the same ports with no data: a new
    /// cluster, its revisions from 1 again.
    pub fn wipe(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
        self.child = self.respawn();
    }

    fn respawn(&self) -> Child {
        // The ports were ours a moment ago; a few tries while the kernel
        // lets them go.
        for _ in 0..20 {
            if let Some(child) = spawn(self.port, self.peer, &self.dir) {
                return child;
            }
            std::thread::sleep(Duration::from_millis(250));
        }
        panic!(
            "etcd did not start again on ports {} and {}",
            self.port, self.peer
        );
    }
}

impl Drop for EtcdServer {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// Runs etcd and waits for the line saying it serves clients (logged once
/// its gRPC server runs, after "ready to serve client requests"); `None` if
/// it exited first (a port was taken) or did not get there in 30 s.
fn spawn(port: u16, peer: u16, dir: &std::path::Path) -> Option<Child> {
    let client_url = format!("http://127.0.0.1:{port}");
    let peer_url = format!("http://127.0.0.1:{peer}");
    let mut child = Command::new(etcd_binary())
        .arg("--name")
        .arg("leasehold-test")
        .arg("--data-dir")
        .arg(dir)
        .args(["--listen-client-urls", &client_url])
        .args(["--advertise-client-urls", &client_url])
        .args(["--listen-peer-urls", &peer_url])
        .args(["--initial-advertise-peer-urls", &peer_url])
        .arg("--initial-cluster")
        .arg(format!("leasehold-test={peer_url}"))
        .args(["--heartbeat-interval", "10", "--election-timeout", "100"])
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| {
            panic!(
                "cannot run '{}' ({e}): install Debian's etcd-server or set LEASEHOLD_ETCD",
                etcd_binary()
            )
        });
    let stderr = child.stderr.take().expect("piped stderr");
    crate::ready_when(
        child,
        stderr,
        "serving insecure client requests",
        Duration::from_secs(30),
    )
}
