//! The Leasehold gRPC API (`leasehold.v1`): the messages and the client and
//! server stubs generated from `leasehold/v1/leasehold.proto`, which documents
//! every call and its guarantees.
//!
//! The bottom of the crate graph: it depends on prost and tonic's code
//! generation support only, so the client (`leasehold-client`) and the server
//! (`leasehold`) share one definition of the API without depending on each
//! other.

// The generated code, as tonic-prost-build writes it: paths spelt out in
// full, and clippy's style not followed. Its docs are the proto's comments
// (buf lint's COMMENTS rule requires one on everything), so `missing_docs`
// holds for it as for the rest of the workspace.
#[allow(unused_qualifications, clippy::all, clippy::pedantic)]
mod generated {
    tonic::include_proto!("leasehold.v1");
    // The canonical proto3 JSON mapping of every message (lowerCamelCase
    // names, the proto names accepted too, 64-bit integers as strings out
    // and as strings or numbers in), for the broker's HTTP/JSON gateway.
    #[cfg(feature = "json")]
    include!(concat!(env!("OUT_DIR"), "/leasehold.v1.serde.rs"));
}
pub use generated::*;

/// The encoded descriptor set of the Leasehold API, served by gRPC reflection
/// so that `grpcurl` works without a copy of the proto.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("leasehold_descriptor");
