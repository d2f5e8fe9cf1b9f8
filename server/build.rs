//! Records the compiler's version for `leasehold_build_info` (metrics.rs):
//! Cargo gives build scripts the `rustc` it builds with, and asking it costs
//! no dependency. And compiles the etcd store's client (store/etcd/) from
//! etcd 3.4's own protos, vendored in `proto/etcd/` by
//! `scripts/vendor-etcd-protos.py`, with protox (no system `protoc`): the
//! KV, Watch, Lease, Maintenance, Cluster and Auth services, client stubs
//! only.

use std::process::Command;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let rustc = std::env::var("RUSTC").unwrap_or_else(|_| "rustc".into());
    let version = Command::new(&rustc)
        .arg("--version")
        .output()
        .ok()
        .filter(|o| o.status.success())
        .and_then(|o| String::from_utf8(o.stdout).ok())
        // "rustc 1.91.0 (f8297e351 2025-10-28)": the version number.
        .and_then(|v| v.split_whitespace().nth(1).map(str::to_owned))
        .unwrap_or_else(|| "unknown".into());
    println!("cargo:rustc-env=LEASEHOLD_RUSTC_VERSION={version}");
    println!("cargo:rerun-if-changed=build.rs");
    println!("cargo:rerun-if-env-changed=RUSTC");

    println!("cargo:rerun-if-changed=proto/etcd");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(protox::compile(
            ["proto/etcd/etcdserver/etcdserverpb/rpc.proto"],
            ["proto"],
        )?)?;
    Ok(())
}
