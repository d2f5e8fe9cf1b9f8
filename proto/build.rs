//! Compiles `leasehold/v1/leasehold.proto` with protox, a pure-Rust protobuf
//! compiler, so that a fresh machine builds without a system `protoc`. The
//! encoded descriptor set is written next to the generated code for gRPC
//! server reflection, and (feature `json`) to generate the serde impls of
//! the canonical proto3 JSON mapping with pbjson-build.

use std::{env, fs, path::PathBuf};

use prost::Message as _;

fn main() -> Result<(), Box<dyn std::error::Error>> {
    println!("cargo:rerun-if-changed=leasehold");
    let fds = protox::compile(["leasehold/v1/leasehold.proto"], ["."])?;
    let out = PathBuf::from(env::var("OUT_DIR")?);
    let encoded = fds.encode_to_vec();
    fs::write(out.join("leasehold_descriptor.bin"), &encoded)?;
    #[cfg(feature = "json")]
    pbjson_build::Builder::new()
        .register_descriptors(&encoded)?
        // Every field in every answer, zeros and empty strings too (as
        // grpc-gateway answers): a reader of `{"current": false}` needs no
        // table of defaults.
        .emit_fields()
        // An unknown field is refused, not dropped: `{"ttl": 5000}` (a
        // misspelt ttlMs) must not grant the default TTL silently.
        .build(&[".leasehold.v1"])?;
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
