//! The Leasehold API (from the `leasehold-proto` crate), and etcd's.

pub use leasehold_proto::*;

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
