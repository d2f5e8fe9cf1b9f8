//! Compiles etcd's lease and lock API (client only, `proto/etcd/`) for the
//! load generator's comparison with etcd (`leasehold-bench cycles --etcd`),
//! with protox, a pure-Rust protobuf compiler: no system `protoc` needed.
//! Leasehold's own API comes from the `leasehold-proto` crate.

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=proto/etcd");
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(protox::compile(
            ["proto/etcd/rpc.proto", "proto/etcd/v3lock.proto"],
            ["proto"],
        )?)?;
    Ok(())
}
