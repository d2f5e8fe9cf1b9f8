//! Redis Sentinel: which server is the primary now, and the follower that
//! moves the store to it.
//!
//! A `redis+sentinel://` store names the sentinels and the master's name,
//! not a Redis server: the store asks the sentinels for the primary's
//! address (`SENTINEL get-master-addr-by-name`), connects there, and asks
//! again every second and whenever a call fails, so that after a failover it
//! moves to the new primary by itself. redis-rs' own Sentinel client finds a
//! primary once but does not follow a failover (redis-rs#1438), hence this.
//!
//! URL: `redis+sentinel://[user:password@]host:port[,host:port...]/master[/db]`
//! (`rediss+sentinel://` for TLS to the sentinels and the data nodes). The
//! user and password are the data nodes'; the sentinels are reached without
//! authentication.

use std::{
    sync::{Arc, Mutex, Weak},
    time::Duration,
};

use redis::{
    aio::{ConnectionManager, MultiplexedConnection},
    ConnectionInfo, IntoConnectionInfo, Value,
};
use tokio::sync::mpsc;

use super::{
    connect::{next_look, Conn, Connector, Topology},
    Inner,
};
use crate::{
    error::{Error, Result},
    store::url::MultiHost,
};

/// The sentinels of one master, and how to reach the data nodes.
pub struct SentinelTarget {
    /// `redis` or `rediss`.
    scheme: &'static str,
    /// `user:password@` as written in the URL (percent-encoded), or empty.
    userinfo: String,
    /// The sentinels' addresses (`host:port`).
    sentinels: Vec<String>,
    /// The master's name in the sentinels' configuration.
    master: String,
    /// The database number on the data nodes.
    db: i64,
    /// One open connection per sentinel, made on first use and dropped
    /// when it fails. A std mutex: taken to clone or replace, never held
    /// across an await.
    connections: Mutex<Vec<Option<MultiplexedConnection>>>,
}

impl std::fmt::Debug for SentinelTarget {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        // Never the password.
        f.debug_struct("SentinelTarget")
            .field("sentinels", &self.sentinels)
            .field("master", &self.master)
            .finish()
    }
}

impl SentinelTarget {
    /// Reads a `redis+sentinel://` or `rediss+sentinel://` URL; `None` for
    /// any other scheme.
    pub fn parse(url: &str) -> Result<Option<Self>> {
        let Some(parsed) = MultiHost::parse(url, "sentinel", "sentinel") else {
            return Ok(None);
        };
        let bad = |why: &str| {
            Error::InvalidArgument(format!(
                "bad Sentinel URL: {why}; write redis+sentinel://[user:password@]host:port[,host:port...]/master[/db] (rediss+ for TLS)"
            ))
        };
        let MultiHost {
            scheme,
            userinfo,
            hosts,
            path,
        } = parsed.map_err(|why| bad(&why))?;
        let sentinels: Vec<String> = hosts.into_iter().map(str::to_owned).collect();
        let path = path.ok_or_else(|| bad("no master name"))?;
        let mut parts = path.split('/');
        let master = parts.next().unwrap_or("").to_owned();
        if master.is_empty() {
            return Err(bad("no master name"));
        }
        let db = match parts.next() {
            None | Some("") => 0,
            Some(db) => db
                .parse()
                .map_err(|_| bad(&format!("database '{db}' is not a number")))?,
        };
        let target = SentinelTarget {
            scheme,
            userinfo,
            connections: Mutex::new(vec![None; sentinels.len()]),
            sentinels,
            master,
            db,
        };
        // Every address must make a connection info (checked now, not at
        // the first failover).
        for s in &target.sentinels {
            target.sentinel_info(s)?;
        }
        target.node_info("127.0.0.1", 6379)?;
        Ok(Some(target))
    }

    /// The master's name.
    pub fn master(&self) -> &str {
        &self.master
    }

    /// The sentinels' addresses, as the URL wrote them.
    pub(crate) fn sentinels(&self) -> &[String] {
        &self.sentinels
    }

    pub(crate) fn sentinel_info(&self, address: &str) -> Result<ConnectionInfo> {
        format!("{}://{address}", self.scheme)
            .into_connection_info()
            .map_err(|e| Error::InvalidArgument(format!("bad sentinel address '{address}': {e}")))
    }

    /// How to reach the data node at `host:port`.
    pub fn node_info(&self, host: &str, port: u16) -> Result<ConnectionInfo> {
        let host = if host.contains(':') {
            format!("[{host}]")
        } else {
            host.to_owned()
        };
        format!(
            "{}://{}{host}:{port}/{}",
            self.scheme, self.userinfo, self.db
        )
        .into_connection_info()
        .map_err(|e| Error::InvalidArgument(format!("bad Sentinel URL: {e}")))
    }

    /// The primary's address as the first sentinel that knows it says,
    /// asking each in turn (`timeout` each). `client` makes a client for a
    /// connection info (with the store's TLS settings).
    pub async fn primary(
        &self,
        timeout: Duration,
        client: &(dyn Fn(ConnectionInfo) -> redis::RedisResult<redis::Client> + Send + Sync),
    ) -> Result<(String, u16)> {
        let mut errors = Vec::new();
        for (i, address) in self.sentinels.iter().enumerate() {
            match tokio::time::timeout(timeout, self.ask(i, address, client)).await {
                Ok(Ok(Some(primary))) => return Ok(primary),
                Ok(Ok(None)) => errors.push(format!("{address}: does not know '{}'", self.master)),
                Ok(Err(e)) => {
                    self.forget(i);
                    errors.push(format!("{address}: {e}"));
                }
                Err(_) => {
                    self.forget(i);
                    errors.push(format!(
                        "{address}: no answer in {} ms",
                        timeout.as_millis()
                    ));
                }
            }
        }
        Err(Error::Unavailable(format!(
            "no sentinel named the primary of '{}' ({})",
            self.master,
            errors.join("; ")
        )))
    }

    async fn ask(
        &self,
        i: usize,
        address: &str,
        client: &(dyn Fn(ConnectionInfo) -> redis::RedisResult<redis::Client> + Send + Sync),
    ) -> redis::RedisResult<Option<(String, u16)>> {
        let cached = self
            .connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[i]
            .clone();
        let mut conn = match cached {
            Some(conn) => conn,
            None => {
                let info = self
                    .sentinel_info(address)
                    .map_err(|e| {
                        redis::RedisError::from((
                            redis::ErrorKind::InvalidClientConfig,
                            "sentinel",
                            e.to_string(),
                        ))
                    })?
                    .set_tcp_settings(redis::io::tcp::TcpSettings::default().set_nodelay(true));
                let conn = client(info)?.get_multiplexed_async_connection().await?;
                self.connections
                    .lock()
                    .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = Some(conn.clone());
                conn
            }
        };
        let reply: Value = redis::cmd("SENTINEL")
            .arg("get-master-addr-by-name")
            .arg(&self.master)
            .query_async(&mut conn)
            .await?;
        Ok(match reply {
            Value::Array(parts) if parts.len() == 2 => {
                let host: String = redis::from_redis_value(parts[0].clone())?;
                let port: u16 = redis::from_redis_value(parts[1].clone())?;
                Some((host, port))
            }
            _ => None,
        })
    }

    fn forget(&self, i: usize) {
        self.connections
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)[i] = None;
    }
}

/// Follows the primary of a Sentinel store: asks the sentinels every
/// [`FOLLOW_INTERVAL`](super::connect::FOLLOW_INTERVAL) and when a failed
/// call suggests a failover; when the primary moved, connects there and
/// hands the new subscription connection to the subscription task. Ends
/// with the store.
pub(super) async fn follow_primary(
    store: Weak<Inner>,
    connector: Arc<Connector>,
    switches: mpsc::UnboundedSender<ConnectionManager>,
) {
    let mut current: Option<(String, u16)> = None;
    let mut failing = false;
    let client = {
        let connector = Arc::clone(&connector);
        move |info: ConnectionInfo| connector.client(info)
    };
    loop {
        let Some(inner) = store.upgrade() else { return };
        let Topology::Sentinel(sentinel) = &inner.topology else {
            return;
        };
        let ask = inner.timeout.min(Duration::from_millis(500));
        match sentinel.primary(ask, &client).await {
            Ok(primary) if current.as_ref() != Some(&primary) => {
                let made = sentinel.node_info(&primary.0, primary.1).and_then(|info| {
                    let conn = connector.commands(info.clone());
                    let sub = connector.subscriber(info);
                    conn.and_then(|c| sub.map(|s| (c, s)))
                        .map_err(|e| Error::Internal(format!("connecting to the primary: {e}")))
                });
                match made {
                    Ok((conn, sub)) => {
                        tracing::info!(
                            master = sentinel.master(),
                            primary = %format!("{}:{}", primary.0, primary.1),
                            previous = ?current.as_ref().map(|(h, p)| format!("{h}:{p}")),
                            "Redis primary (named by Sentinel)"
                        );
                        *inner
                            .conn
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) =
                            Some(Conn::Single(conn));
                        *inner
                            .subscriber
                            .write()
                            .unwrap_or_else(std::sync::PoisonError::into_inner) = Some(sub.clone());
                        let _ = switches.send(sub);
                        current = Some(primary);
                        failing = false;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot connect to the primary Sentinel named");
                    }
                }
            }
            Ok(_) => failing = false,
            Err(e) => {
                if !failing {
                    tracing::warn!(error = %e, "cannot learn the Redis primary from Sentinel");
                }
                failing = true;
            }
        }
        next_look(inner).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sentinel_urls_name_sentinels_master_and_database() {
        let t = SentinelTarget::parse("redis+sentinel://:pw@10.0.0.1:26379,s2:26380/mymaster/2")
            .unwrap()
            .unwrap();
        assert_eq!(t.sentinels, ["10.0.0.1:26379", "s2:26380"]);
        assert_eq!(t.master(), "mymaster");
        assert_eq!(t.db, 2);
        let node = t.node_info("10.0.0.9", 6380).unwrap();
        assert_eq!(node.redis_settings().password(), Some("pw"));
        assert_eq!(node.redis_settings().db(), 2);
        assert!(format!("{t:?}").find("pw").is_none());
        assert!(SentinelTarget::parse("redis://h:1/0").unwrap().is_none());
        let t = SentinelTarget::parse("rediss+sentinel://s:1/m")
            .unwrap()
            .unwrap();
        assert!(matches!(
            t.node_info("::1", 7000).unwrap().addr(),
            redis::ConnectionAddr::TcpTls { .. }
        ));
    }

    #[test]
    fn bad_sentinel_urls_say_what_is_missing() {
        for (url, want) in [
            ("redis+sentinel://s:1", "no master name"),
            ("redis+sentinel://s:1/", "no master name"),
            ("redis+sentinel:///m", "no sentinel address"),
            ("redis+sentinel://s/m", "has no port"),
            ("redis+sentinel://s:1/m/x", "not a number"),
        ] {
            let e = SentinelTarget::parse(url).unwrap_err().to_string();
            assert!(e.contains(want), "{url}: {e}");
        }
    }
}
