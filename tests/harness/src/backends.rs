//! The one list of store backends the conformance suite
//! (`tests/conformance.rs`) and the model checker (`tests/model_check.rs`)
//! run on. A new backend joins [`Backend`] and [`for_each_backend!`]: the
//! conformance suite then runs every one of its tests on it, and the model
//! checker runs on it as the [`crate::model::nemesis::StoreKind`] variant
//! of the same name (the expansion does not compile until that variant and
//! its nemesis exist). A test below holds the macro and [`BACKENDS`] to the
//! enum.

use std::time::Duration;

use leasehold_server::store::{RecordFormat, Store, StoreOptions};

use crate::{etcd::EtcdServer, postgres::PostgresServer, RedisServer, ZooKeeperServer};

/// A store backend of the broker (`store::Store`'s backends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded memory store.
    Memory,
    /// One redis-server.
    Redis,
    /// One PostgreSQL server.
    Postgres,
    /// One etcd member.
    Etcd,
    /// One ZooKeeper server.
    ZooKeeper,
}

/// Every backend, in the order [`for_each_backend!`] lists them.
pub const BACKENDS: [Backend; 5] = [
    Backend::Memory,
    Backend::Redis,
    Backend::Postgres,
    Backend::Etcd,
    Backend::ZooKeeper,
];

/// Expands `$m!(module, Variant $(, args)*)` once per backend: `module`
/// the backend's name as a module (and as [`Backend::name`] spells it),
/// `Variant` its [`Backend`] variant (and the model checker's `StoreKind`).
#[macro_export]
macro_rules! for_each_backend {
    ($m:ident $(, $arg:tt)*) => {
        $m!(memory, Memory $(, $arg)*);
        $m!(redis, Redis $(, $arg)*);
        $m!(postgres, Postgres $(, $arg)*);
        $m!(etcd, Etcd $(, $arg)*);
        $m!(zookeeper, ZooKeeper $(, $arg)*);
    };
}

/// A store opened on a backend, with the server it needs (stopped on drop).
pub struct OpenStore {
    /// The store, as the broker opens it.
    pub store: Store,
    /// How its clock reads the suite's times.
    pub timing: Timing,
    /// The server behind it; `None` for the memory store.
    _server: Option<Box<dyn Send>>,
}

/// How a backend's expiry reads the times a test gives in milliseconds.
///
/// Memory, Redis and PostgreSQL expire a lease at its TTL to the
/// millisecond. etcd's leases are whole seconds, and its leader revokes an
/// expired one within about half a second: there the suite's times are
/// stretched (times [`Timing::scale`]), TTLs rounded up to whole seconds,
/// and every wait for an expiry given the revocation's lag too.
#[derive(Clone, Copy, Debug)]
pub struct Timing {
    /// The factor every time is stretched by.
    pub scale: u64,
    /// Whether TTLs are whole seconds.
    pub whole_seconds: bool,
    /// How late past its TTL the store may end a lease.
    pub lag_ms: u64,
}

impl Timing {
    /// Milliseconds to the millisecond.
    pub const EXACT: Timing = Timing {
        scale: 1,
        whole_seconds: false,
        lag_ms: 0,
    };

    /// A TTL the suite writes as `ms`.
    pub fn ttl(self, ms: u64) -> u64 {
        let ms = ms * self.scale;
        if self.whole_seconds {
            ms.div_ceil(1_000) * 1_000
        } else {
            ms
        }
    }

    /// A bound on a time the store reports, written as `ms`: stretched,
    /// and rounded as the TTLs are.
    pub fn ms(self, ms: u64) -> u64 {
        self.ttl(ms)
    }

    /// A wait the suite writes as `ms` for something to expire: stretched,
    /// with the store's lag on top.
    pub fn wait(self, ms: u64) -> Duration {
        Duration::from_millis(ms * self.scale + self.lag_ms)
    }

    /// A wait past the contract's 10 s linger of a record (not
    /// stretched: the linger is the contract's, on every store), with
    /// etcd's slice of its linger lease and its lag on top.
    pub fn after_linger(self) -> Duration {
        let slice = if self.whole_seconds { 1_000 } else { 0 };
        Duration::from_millis(10_500 + slice + self.lag_ms)
    }

    /// Sleeps [`Timing::wait`]`(ms)`.
    pub async fn sleep(self, ms: u64) {
        tokio::time::sleep(self.wait(ms)).await;
    }
}

impl Backend {
    /// Its name, as [`for_each_backend!`] names its module.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
            Backend::Postgres => "postgres",
            Backend::Etcd => "etcd",
            Backend::ZooKeeper => "zookeeper",
        }
    }

    /// Starts the backend's server (none for memory) on free loopback
    /// ports and opens a store on it with `key_prefix` and a store timeout
    /// of `timeout`.
    pub fn open(self, key_prefix: &str, timeout: Duration) -> OpenStore {
        let options = StoreOptions::new(key_prefix, timeout);
        let open = |url: &str| {
            Store::open(url, &options)
                .unwrap_or_else(|e| panic!("open the {} store: {e}", self.name()))
        };
        let timing = self.timing();
        match self {
            Backend::Memory => OpenStore {
                store: open("memory"),
                timing,
                _server: None,
            },
            Backend::Redis => {
                let redis = RedisServer::start();
                OpenStore {
                    store: open(&redis.url()),
                    timing,
                    _server: Some(Box::new(redis)),
                }
            }
            Backend::Postgres => {
                let postgres = PostgresServer::start();
                OpenStore {
                    store: open(&postgres.url()),
                    timing,
                    _server: Some(Box::new(postgres)),
                }
            }
            Backend::Etcd => {
                let etcd = EtcdServer::start();
                OpenStore {
                    store: open(&etcd.store_url()),
                    timing,
                    _server: Some(Box::new(etcd)),
                }
            }
            Backend::ZooKeeper => {
                let zookeeper = ZooKeeperServer::start();
                OpenStore {
                    store: open(&zookeeper.url()),
                    timing,
                    _server: Some(Box::new(zookeeper)),
                }
            }
        }
    }

    /// Starts a redis-server on a free loopback port and opens a store on
    /// it that writes lease records in `format` ([`Backend::Redis`] writes
    /// the default format).
    pub fn open_redis(key_prefix: &str, timeout: Duration, format: RecordFormat) -> OpenStore {
        let redis = RedisServer::start();
        let mut options = StoreOptions::new(key_prefix, timeout);
        options.record_format = format;
        OpenStore {
            store: Store::open(&redis.url(), &options)
                .unwrap_or_else(|e| panic!("open the redis store: {e}")),
            timing: Timing::EXACT,
            _server: Some(Box::new(redis)),
        }
    }

    /// How the backend's expiry reads the suite's times.
    pub fn timing(self) -> Timing {
        match self {
            // ZooKeeper's leader stamps to the millisecond, and a lease
            // is judged at the next write's stamp: exact.
            Backend::Memory | Backend::Redis | Backend::Postgres | Backend::ZooKeeper => {
                Timing::EXACT
            }
            // etcd 3.4's lessor looks for expired leases every 500 ms,
            // and revokes each in a Raft write of its own.
            Backend::Etcd => Timing {
                scale: 5,
                whole_seconds: true,
                lag_ms: 1_000,
            },
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The macro lists [`BACKENDS`], in order, each under its name; and
    /// [`BACKENDS`] holds every variant (the match below is exhaustive, so
    /// a new variant fails to compile until it is counted).
    #[test]
    fn the_macro_and_the_list_agree_with_the_enum() {
        let mut listed = Vec::new();
        macro_rules! record {
            ($module:ident, $variant:ident, $into:tt) => {
                $into.push((stringify!($module), Backend::$variant));
            };
        }
        for_each_backend!(record, listed);
        let expected: Vec<_> = BACKENDS.iter().map(|b| (b.name(), *b)).collect();
        assert_eq!(listed, expected);
        for backend in BACKENDS {
            let index = match backend {
                Backend::Memory => 0,
                Backend::Redis => 1,
                Backend::Postgres => 2,
                Backend::Etcd => 3,
                Backend::ZooKeeper => 4,
            };
            assert_eq!(BACKENDS[index], backend);
        }
        assert_eq!(BACKENDS.len(), 5, "a variant was added: count it above");
    }
}
