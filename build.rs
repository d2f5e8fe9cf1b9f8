//! Compiles `proto/` with protox, a pure-Rust protobuf compiler, so that a
//! fresh machine builds without a system `protoc`. The encoded descriptor set
//! is written next to the generated code for gRPC server reflection.

use std::{env, fs, path::PathBuf};

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    let protos = ["proto/leasehold/v1/leasehold.proto"];
    println!("cargo:rerun-if-changed=proto");
    let fds = protox::compile(protos, ["proto"])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("leasehold_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        .compile_fds(fds)?;
    // etcd's lease and lock API, client only: the load generator's etcd
    // comparison (`leasehold bench ... --etcd`).
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(false)
        .compile_fds(protox::compile(
            ["proto/etcd/rpc.proto", "proto/etcd/v3lock.proto"],
            ["proto"],
        )?)?;
    Ok(())
}
