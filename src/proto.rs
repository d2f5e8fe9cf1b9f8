//! Code generated from `proto/leasehold/v1/leasehold.proto` by `build.rs`.

#![allow(missing_docs, clippy::all)]

tonic::include_proto!("leasehold.v1");

/// The encoded descriptor set of the Leasehold API, served by gRPC reflection
/// so that `grpcurl` works without a copy of the proto.
pub const FILE_DESCRIPTOR_SET: &[u8] = tonic::include_file_descriptor_set!("leasehold_descriptor");

/// etcd's lease and lock API (a client, for the load generator's comparison
/// with etcd; see `proto/etcd/`).
pub mod etcd {
    #![allow(missing_docs, clippy::all)]

    /// etcd's `etcdserverpb` package: leases.
    pub mod etcdserverpb {
        tonic::include_proto!("etcdserverpb");
    }

    /// etcd's `v3lockpb` package: the lock service.
    pub mod v3lockpb {
        tonic::include_proto!("v3lockpb");
    }
}
