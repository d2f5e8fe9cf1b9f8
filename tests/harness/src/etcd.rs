//! A real etcd for the tests that compare the broker with it (the load
//! generator's `--etcd`): Debian's etcd-server (`etcd` on the PATH, or
//! `$LEASEHOLD_ETCD`), one member listening on free loopback ports (client
//! and peer), its data in a temporary folder removed on drop.

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
                return EtcdServer { port, dir, child };
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

    /// Its process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
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
