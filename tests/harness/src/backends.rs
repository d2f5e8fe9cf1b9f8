//! The one list of store backends the conformance suite
//! (`tests/conformance.rs`) and the model checker (`tests/model_check.rs`)
//! run on. A new backend joins [`Backend`] and [`for_each_backend!`]: the
//! conformance suite then runs every one of its tests on it, and the model
//! checker runs on it as the [`crate::model::nemesis::StoreKind`] variant
//! of the same name (the expansion does not compile until that variant and
//! its nemesis exist). A test below holds the macro and [`BACKENDS`] to the
//! enum.

use std::time::Duration;

use leasehold_server::store::{Store, StoreOptions};

use crate::{postgres::PostgresServer, RedisServer};

/// A store backend of the broker (`store::Store`'s backends).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Backend {
    /// The embedded memory store.
    Memory,
    /// One redis-server.
    Redis,
    /// One PostgreSQL server.
    Postgres,
}

/// Every backend, in the order [`for_each_backend!`] lists them.
pub const BACKENDS: [Backend; 3] = [Backend::Memory, Backend::Redis, Backend::Postgres];

/// Expands `$m!(module, Variant $(, args)*)` once per backend: `module`
/// the backend's name as a module (and as [`Backend::name`] spells it),
/// `Variant` its [`Backend`] variant (and the model checker's `StoreKind`).
#[macro_export]
macro_rules! for_each_backend {
    ($m:ident $(, $arg:tt)*) => {
        $m!(memory, Memory $(, $arg)*);
        $m!(redis, Redis $(, $arg)*);
        $m!(postgres, Postgres $(, $arg)*);
    };
}

/// A store opened on a backend, with the server it needs (stopped on drop).
pub struct OpenStore {
    /// The store, as the broker opens it.
    pub store: Store,
    /// The server behind it; `None` for the memory store.
    _server: Option<Box<dyn Send>>,
}

impl Backend {
    /// Its name, as [`for_each_backend!`] names its module.
    pub fn name(self) -> &'static str {
        match self {
            Backend::Memory => "memory",
            Backend::Redis => "redis",
            Backend::Postgres => "postgres",
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
        match self {
            Backend::Memory => OpenStore {
                store: open("memory"),
                _server: None,
            },
            Backend::Redis => {
                let redis = RedisServer::start();
                OpenStore {
                    store: open(&redis.url()),
                    _server: Some(Box::new(redis)),
                }
            }
            Backend::Postgres => {
                let postgres = PostgresServer::start();
                OpenStore {
                    store: open(&postgres.url()),
                    _server: Some(Box::new(postgres)),
                }
            }
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
            };
            assert_eq!(BACKENDS[index], backend);
        }
        assert_eq!(BACKENDS.len(), 3, "a variant was added: count it above");
    }
}
