//! The Leasehold API: the `leasehold-proto` crate, re-exported so that the
//! broker's modules name it as `crate::proto`.

pub use leasehold_proto::*;
