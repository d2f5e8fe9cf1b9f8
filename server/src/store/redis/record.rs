//! A lock's lease record read straight from Redis, in either format
//! (`lua/record.lua` says what each holds): for the benchmarks and tests
//! that look behind a broker's back, and operators' tools. The broker
//! itself reads records only inside its scripts.

use redis::aio::ConnectionLike;

use crate::store::contract::LINGER_MS;

/// The fields of a live or expired lease's record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LeaseRecord {
    /// The owner token.
    pub owner: String,
    /// The fence.
    pub fence: u64,
    /// When it was granted, ms by the Redis clock.
    pub granted_ms: i64,
    /// When it expires (expired), ms by the Redis clock.
    pub expiry_ms: i64,
    /// The record's format: 1 (a hash) or 2 (a string).
    pub format: u8,
}

/// The lease record at `key` ([`super::lease_key`]); `None` when there is
/// none, or a tombstone (a revoked lease, no owner).
pub async fn read_record(
    conn: &mut impl ConnectionLike,
    key: &str,
) -> Result<Option<LeaseRecord>, String> {
    let fail = |e: redis::RedisError| format!("reading the lease record {key}: {e}");
    let bad = |what: &str| format!("the lease record {key} has no valid {what}");
    let kind: String = redis::cmd("TYPE")
        .arg(key)
        .query_async(conn)
        .await
        .map_err(fail)?;
    match kind.as_str() {
        "hash" => {
            let (o, f, g, e): (
                Option<String>,
                Option<String>,
                Option<String>,
                Option<String>,
            ) = redis::cmd("HMGET")
                .arg(key)
                .arg(&["o", "f", "g", "e"])
                .query_async(conn)
                .await
                .map_err(fail)?;
            let Some(owner) = o else { return Ok(None) };
            Ok(Some(LeaseRecord {
                owner,
                fence: f.and_then(|f| f.parse().ok()).ok_or_else(|| bad("fence"))?,
                granted_ms: g
                    .and_then(|g| g.parse().ok())
                    .ok_or_else(|| bad("grant time"))?,
                expiry_ms: e
                    .and_then(|e| e.parse().ok())
                    .ok_or_else(|| bad("expiry"))?,
                format: 1,
            }))
        }
        "string" => {
            let (value, expires_at): (String, i64) = redis::pipe()
                .cmd("GET")
                .arg(key)
                .cmd("PEXPIRETIME")
                .arg(key)
                .query_async(conn)
                .await
                .map_err(fail)?;
            // 'L' o '|' n d '|' f '|' t '|' g '|' h; a tombstone: 'R' ...
            let Some(lease) = value.strip_prefix('L') else {
                return Ok(None);
            };
            let mut fields = lease.splitn(6, '|');
            let mut next = |what: &str| fields.next().ok_or_else(|| bad(what));
            let owner = next("owner")?.to_owned();
            let delay: i64 = next("lock-delay")?
                .get(1..)
                .and_then(|d| d.parse().ok())
                .ok_or_else(|| bad("lock-delay"))?;
            let fence = next("fence")?.parse().map_err(|_| bad("fence"))?;
            next("TTL")?;
            let granted_ms = next("grant time")?.parse().map_err(|_| bad("grant time"))?;
            Ok(Some(LeaseRecord {
                owner,
                fence,
                granted_ms,
                // The key lives until the expiry, its lock-delay and the
                // linger.
                expiry_ms: expires_at - delay - LINGER_MS,
                format: 2,
            }))
        }
        "none" => Ok(None),
        other => Err(format!("{key} is a {other}, not a lease record")),
    }
}
