//! Compiles `leasehold/v1/leasehold.proto` with protox, a pure-Rust protobuf
//! compiler, so that a fresh machine builds without a system `protoc`. The
//! encoded descriptor set is written next to the generated code for gRPC
//! server reflection.

use std::{env, fs, path::PathBuf};

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=leasehold");
    let fds = protox::compile(["leasehold/v1/leasehold.proto"], ["."])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    fs::write(out.join("leasehold_descriptor.bin"), fds.encode_to_vec())?;
    tonic_prost_build::configure()
        .build_client(true)
        .build_server(true)
        // The client's transport is the user's choice (tonic's Channel by
        // default, in leasehold-client); the generated code needs none.
        .build_transport(false)
        // A Session answer is one enum of every kind of answer, sized to the
        // largest: the error (with its metadata map) is boxed, so that the
        // grants and renewals of the common path stay small.
        .boxed(".leasehold.v1.SessionResponse.response.error")
        .compile_fds(fds)?;
    Ok(())
}
