//! Compiles etcd 3.4's v3 API (client only: KV, Watch,
//! Lease, Cluster, Maintenance and Auth, the lock service, and the mvccpb
//! and authpb messages they use; vendored in `server/proto/etcd/` by
//! `server/scripts/vendor-etcd-protos.py`, where the etcd store compiles
//! them too) for the load generator's comparisons
//! with etcd (`leasehold-bench cycles --etcd`, `heartbeats --etcd`,
//! `etcd-mapping`), with protox, a pure-Rust protobuf compiler: no system
//! `protoc` needed. Leasehold's own API comes from the `leasehold-proto`
//! crate.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=../server/proto/etcd");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(protox::compile(
            [
                "../server/proto/etcd/etcdserver/etcdserverpb/rpc.proto",
                "../server/proto/etcd/etcdserver/api/v3lock/v3lockpb/v3lock.proto",
            ],
            ["../server/proto"],
        )?)?;
    Ok(())
}
