//! The request limits the lease rules enforce: TTL bounds, waits, sizes and
//! the per-tenant and per-connection caps.

use std::time::Duration;

use super::Caps;
use crate::duration::format_duration;

/// Bounds on what a request may ask for. Past a bound, the request fails with
/// INVALID_ARGUMENT or RESOURCE_EXHAUSTED and a message naming the bound
/// (by its flag: the operator's word for it). Set from the flags of the
/// same names (`config::LimitFlags`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Limits {
    /// Shortest lease a client may ask for.
    pub ttl_min: Duration,

    /// Longest lease a client may ask for.
    pub ttl_max: Duration,

    /// Lease TTL when a request gives none (ttl_ms = 0).
    pub ttl_default: Duration,

    /// Shortest TTL `ttl_auto` chooses, however fast the heartbeats: a
    /// lease lives through process stalls as well as network ones, which
    /// no round trip measures. Taken within `ttl_min` and `ttl_max` (not
    /// refused outside them: a `--ttl-max 5s` alone must not make the
    /// default floor of 10 s an error the operator never wrote).
    pub ttl_auto_floor: Duration,

    /// Longest an Acquire may wait for a held lock.
    pub max_wait: Duration,

    /// Longest lock-delay an Acquire may ask for.
    pub max_lock_delay: Duration,

    /// Most permits a semaphore may have (an Acquire's `limit`).
    pub max_semaphore_limit: u32,

    /// Most Acquire calls that may wait at once on this replica.
    pub max_waiters: usize,

    /// Most leases one KeepAlive heartbeat may name. The clients of this
    /// repository split a larger set over several heartbeats of 1,000.
    pub max_stream_leases: usize,

    /// Most heartbeats per second one KeepAlive stream may send; more are
    /// read later (back-pressure), not dropped.
    pub max_stream_rate: u32,

    /// Longest lock name, in bytes.
    pub max_name_len: usize,

    /// Longest holder label, in bytes.
    pub max_holder_len: usize,

    /// Most leases one tenant may hold through this replica; 0 for no cap.
    /// Applies with --auth-file (without it there are no tenants), to
    /// `@root` as to any tenant.
    pub tenant_max_leases: usize,

    /// Most Acquire calls one tenant may have waiting on this replica; 0 for
    /// no cap.
    pub tenant_max_waiters: usize,

    /// Most KeepAlive and Observe streams one tenant may have open on this
    /// replica; 0 for no cap.
    pub tenant_max_streams: usize,

    /// Most requests per second (calls and stream opens) from one tenant to
    /// this replica, with a burst of one second's worth; 0 for no cap.
    pub tenant_max_rate: u32,

    /// Most leases taken through one connection and held; 0 for no cap.
    pub conn_max_leases: usize,

    /// Most Acquire calls waiting at once on one connection; 0 for no cap.
    pub conn_max_waiters: usize,

    /// Most KeepAlive and Observe streams open on one connection; 0 for no
    /// cap.
    pub conn_max_streams: usize,

    /// Most requests per second on one connection, with a burst of one
    /// second's worth; 0 for no cap.
    pub conn_max_rate: u32,
}

impl Default for Limits {
    fn default() -> Self {
        Limits {
            ttl_min: Duration::from_millis(500),
            ttl_max: Duration::from_secs(3600),
            ttl_default: Duration::from_secs(10),
            ttl_auto_floor: Duration::from_secs(10),
            max_wait: Duration::from_secs(300),
            max_lock_delay: Duration::from_secs(60),
            max_semaphore_limit: 1_000,
            max_waiters: 10_000,
            max_stream_leases: 1_000,
            max_stream_rate: 100,
            max_name_len: 256,
            max_holder_len: 256,
            tenant_max_leases: 0,
            tenant_max_waiters: 0,
            tenant_max_streams: 0,
            tenant_max_rate: 0,
            conn_max_leases: 0,
            conn_max_waiters: 0,
            conn_max_streams: 0,
            conn_max_rate: 0,
        }
    }
}

impl Limits {
    /// The caps of each tenant.
    pub fn tenant_caps(&self) -> Caps {
        Caps {
            leases: self.tenant_max_leases,
            waiters: self.tenant_max_waiters,
            streams: self.tenant_max_streams,
            rate: self.tenant_max_rate,
        }
    }

    /// The caps of each connection.
    pub fn conn_caps(&self) -> Caps {
        Caps {
            leases: self.conn_max_leases,
            waiters: self.conn_max_waiters,
            streams: self.conn_max_streams,
            rate: self.conn_max_rate,
        }
    }

    /// Checks that the limits make sense together, so a misconfiguration is
    /// reported at start-up rather than as odd request failures.
    pub fn check(&self) -> Result<(), String> {
        if self.ttl_min.is_zero() {
            return Err("--ttl-min must be above zero".into());
        }
        if self.ttl_min > self.ttl_max {
            return Err(format!(
                "--ttl-min ({}) is above --ttl-max ({})",
                format_duration(self.ttl_min),
                format_duration(self.ttl_max)
            ));
        }
        if self.ttl_default < self.ttl_min || self.ttl_default > self.ttl_max {
            return Err(format!(
                "--ttl-default ({}) must lie within --ttl-min and --ttl-max ({} to {})",
                format_duration(self.ttl_default),
                format_duration(self.ttl_min),
                format_duration(self.ttl_max)
            ));
        }
        if self.max_stream_rate == 0 {
            return Err("--max-stream-rate must be at least 1".into());
        }
        if self.max_name_len == 0 {
            return Err("--max-name-len must be at least 1".into());
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn inconsistent_limits_are_refused() {
        let mut limits = Limits::default();
        assert_eq!(limits.check(), Ok(()));
        limits.ttl_default = Duration::from_millis(100);
        assert!(limits.check().unwrap_err().contains("--ttl-default"));
    }
}
