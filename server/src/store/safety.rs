//! What a health ping learns of how the store is set up: the settings under
//! which it may lose leases, read at start and at every ping (so that a
//! setting changed at run time, `CONFIG SET` or `ALTER SYSTEM`, is seen
//! within a ping interval, both ways).
//!
//! Two kinds of setting, told apart because they fail differently:
//!
//! * [`Risk::Unsafe`]: the store may drop a live lease *while it runs*, or
//!   forget a grant it acknowledged at a crash of the server process: the
//!   lock is then granted to a second holder while the first still believes
//!   it holds, and nothing tells the first before its next heartbeat. Redis
//!   evicting keys (`maxmemory` set and a `maxmemory-policy` other than
//!   `noeviction`: `volatile-*` evicts exactly the keys with a TTL, which
//!   leases are; `allkeys-*` evicts them too, and the fence counters), and
//!   PostgreSQL committing asynchronously (`synchronous_commit = off` in the
//!   broker's sessions: a crash of the server loses the commits of the last
//!   few hundred milliseconds). `--store-unsafe=refuse` (the default) stops
//!   serving while one holds; `warn` serves and says so.
//! * [`Risk::NotDurable`]: only a crash of the store (or of its host) loses
//!   leases, every lease at once, and the holders are told at their next
//!   heartbeat (`store_lost`); fences stay monotonic (their clock term).
//!   Redis without an append-only file (`appendonly no`: a restart comes
//!   back empty, or from its last snapshot), PostgreSQL with `fsync = off`
//!   (a crash of the host, not of PostgreSQL alone). The usual set-up of a
//!   cache, and of the tests: reported (log, metric), never refused.
//!
//! Redis' settings come from `INFO` (which managed services that block
//! `CONFIG` still answer); PostgreSQL's from `current_setting()` in one of
//! the broker's own pooled sessions, so that what is read is what the
//! broker's commits use (a per-session `SET synchronous_commit = on` shows
//! as `on`, whatever the server's default).

/// A store setting the health pings read.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum Setting {
    /// Redis `maxmemory-policy`, with `maxmemory` above 0.
    MaxmemoryPolicy,
    /// PostgreSQL `synchronous_commit` in the broker's sessions.
    SynchronousCommit,
    /// Redis `appendonly`.
    Appendonly,
    /// PostgreSQL `fsync`.
    Fsync,
    /// etcd's version, in a cluster of several members: before 3.4.31 and
    /// 3.5.13, a deposed leader stuck on a slow disk can still revoke
    /// leases (etcd#15247).
    EtcdVersion,
}

/// What a setting risks (see the module doc).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Risk {
    /// A lease can be lost while its holder still holds it: refused by
    /// `--store-unsafe=refuse`.
    Unsafe,
    /// Every lease is lost at a crash of the store, and the holders told.
    NotDurable,
}

impl Setting {
    /// Every setting, so that each metric series exists from start-up.
    pub const ALL: [Setting; 5] = [
        Setting::MaxmemoryPolicy,
        Setting::SynchronousCommit,
        Setting::Appendonly,
        Setting::Fsync,
        Setting::EtcdVersion,
    ];

    /// The setting's name in the store's own words (and the metrics'
    /// `setting` label).
    pub fn as_str(self) -> &'static str {
        match self {
            Setting::MaxmemoryPolicy => "maxmemory-policy",
            Setting::SynchronousCommit => "synchronous_commit",
            Setting::Appendonly => "appendonly",
            Setting::Fsync => "fsync",
            Setting::EtcdVersion => "etcd-version",
        }
    }

    /// What it risks.
    pub fn risk(self) -> Risk {
        match self {
            Setting::MaxmemoryPolicy | Setting::SynchronousCommit | Setting::EtcdVersion => {
                Risk::Unsafe
            }
            Setting::Appendonly | Setting::Fsync => Risk::NotDurable,
        }
    }
}

/// A setting found unsafe or not durable, with its value.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Finding {
    /// Which.
    pub setting: Setting,
    /// Its value as the store gave it (for Redis' policy, with `maxmemory`).
    pub value: String,
}

impl Finding {
    /// What it means for leases, and how to fix it, for the log and for the
    /// refusal's message.
    pub fn explain(&self) -> String {
        let value = &self.value;
        match self.setting {
            Setting::MaxmemoryPolicy => format!(
                "Redis maxmemory-policy is {value}: at maxmemory Redis evicts keys, and an \
                 evicted lease is a lock granted twice; set maxmemory-policy noeviction (CONFIG \
                 SET maxmemory-policy noeviction, redis.conf, or the managed service's \
                 parameters)"
            ),
            Setting::SynchronousCommit => format!(
                "PostgreSQL synchronous_commit is {value} in the broker's sessions: a crash of \
                 the server loses the grants of its last moments, and such a lock can be granted \
                 again while its holder still holds it; set synchronous_commit = on (ALTER \
                 SYSTEM, or ALTER ROLE ... SET, then SELECT pg_reload_conf())"
            ),
            Setting::Appendonly => format!(
                "Redis appendonly is {value}: a restart of Redis loses every lease (holders are \
                 told at their next heartbeat; fences stay monotonic); set appendonly yes to \
                 keep leases across restarts"
            ),
            Setting::Fsync => format!(
                "PostgreSQL fsync is {value}: a crash of its host can lose or corrupt leases \
                 (holders are told at their next heartbeat; fences stay monotonic); set fsync = \
                 on"
            ),
            Setting::EtcdVersion => format!(
                "etcd is {value}: in a cluster of several members, a leader deposed while \
                 stuck on a slow disk can still revoke leases (etcd#15247), and such a lock \
                 can be granted again while its holder still holds it; upgrade etcd to 3.4.31, \
                 3.5.13 or newer"
            ),
        }
    }
}

/// What one health ping learnt of the store's settings.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Settings {
    /// The settings found unsafe or not durable, in [`Setting`] order.
    pub findings: Vec<Finding>,
    /// Why the settings could not be read, if they could not (the store
    /// answered, but not this: a command refused by an ACL, a reply without
    /// the fields); nothing is then known to be unsafe.
    pub unread: Option<String>,
}

impl Settings {
    /// The findings that `--store-unsafe=refuse` refuses.
    pub fn unsafe_findings(&self) -> impl Iterator<Item = &Finding> {
        self.findings
            .iter()
            .filter(|f| f.setting.risk() == Risk::Unsafe)
    }

    /// Whether `setting` was found.
    pub fn has(&self, setting: Setting) -> bool {
        self.findings.iter().any(|f| f.setting == setting)
    }
}

/// What Redis' `INFO` reply (its default sections: memory, persistence,
/// replication...) says, as far as leases care.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RedisInfo {
    /// The settings.
    pub settings: Settings,
    /// `role:slave`: a replica, which takes no writes.
    pub replica: bool,
}

/// Reads an `INFO` reply. An evicting policy is unsafe only with a
/// `maxmemory` above 0: without a limit Redis evicts nothing, whatever the
/// policy (the default of a self-run Redis is `noeviction` and no limit; a
/// managed one's is often `volatile-lru` with a limit).
pub fn redis_info(info: &str) -> RedisInfo {
    let field = |name: &str| {
        info.lines().find_map(|line| {
            let (key, value) = line.trim_end_matches('\r').split_once(':')?;
            (key == name).then(|| value.trim().to_owned())
        })
    };
    let mut settings = Settings::default();
    match (field("maxmemory"), field("maxmemory_policy")) {
        (Some(max), Some(policy)) => match max.parse::<u64>() {
            Ok(max) if max > 0 && policy != "noeviction" => settings.findings.push(Finding {
                setting: Setting::MaxmemoryPolicy,
                value: format!("{policy} (maxmemory {max} bytes)"),
            }),
            Ok(_) => {}
            Err(_) => settings.unread = Some(format!("INFO memory: maxmemory '{max}'")),
        },
        _ => {
            settings.unread =
                Some("INFO memory has no maxmemory or maxmemory_policy field".to_owned());
        }
    }
    match field("aof_enabled").as_deref() {
        Some("0") => settings.findings.push(Finding {
            setting: Setting::Appendonly,
            value: "no".to_owned(),
        }),
        Some(_) => {}
        None => {
            settings
                .unread
                .get_or_insert_with(|| "INFO persistence has no aof_enabled field".to_owned());
        }
    }
    RedisInfo {
        settings,
        replica: field("role").as_deref() == Some("slave"),
    }
}

/// The findings of PostgreSQL's `synchronous_commit` and `fsync` values.
/// `synchronous_commit` is unsafe only when `off`: `local`, `remote_write`,
/// `on` and `remote_apply` all flush the commit to this server's disk before
/// it is acknowledged (what a crash of the server needs; what a failover to
/// a standby needs is synchronous_standby_names' matter).
pub fn postgres_settings(synchronous_commit: &str, fsync: &str) -> Settings {
    let mut settings = Settings::default();
    if synchronous_commit == "off" {
        settings.findings.push(Finding {
            setting: Setting::SynchronousCommit,
            value: synchronous_commit.to_owned(),
        });
    }
    if fsync == "off" {
        settings.findings.push(Finding {
            setting: Setting::Fsync,
            value: fsync.to_owned(),
        });
    }
    settings
}

#[cfg(test)]
mod tests {
    use super::*;

    fn info(maxmemory: u64, policy: &str, aof: u8, role: &str) -> String {
        format!(
            "# Memory\r\nused_memory:1000\r\nmaxmemory:{maxmemory}\r\nmaxmemory_human:0B\r\n\
             maxmemory_policy:{policy}\r\n\r\n# Persistence\r\nloading:0\r\naof_enabled:{aof}\r\n\
             \r\n# Replication\r\nrole:{role}\r\nconnected_slaves:0\r\n"
        )
    }

    #[test]
    fn an_evicting_policy_is_unsafe_only_with_a_memory_limit() {
        let safe = redis_info(&info(0, "volatile-lru", 1, "master"));
        assert_eq!(safe.settings, Settings::default());
        assert!(!safe.replica);
        assert_eq!(
            redis_info(&info(104_857_600, "noeviction", 1, "master")).settings,
            Settings::default()
        );
        for policy in [
            "volatile-lru",
            "allkeys-lru",
            "volatile-ttl",
            "allkeys-random",
        ] {
            let found = redis_info(&info(104_857_600, policy, 1, "master")).settings;
            assert_eq!(
                found
                    .unsafe_findings()
                    .map(|f| f.setting)
                    .collect::<Vec<_>>(),
                [Setting::MaxmemoryPolicy],
                "{policy}"
            );
            assert!(found.findings[0].value.starts_with(policy), "{found:?}");
            assert!(found.findings[0].explain().contains("noeviction"));
        }
    }

    #[test]
    fn no_append_only_file_is_not_durable_and_a_replica_is_seen() {
        let found = redis_info(&info(0, "noeviction", 0, "slave"));
        assert!(found.replica);
        assert!(found.settings.has(Setting::Appendonly));
        assert_eq!(found.settings.unsafe_findings().count(), 0);
    }

    #[test]
    fn a_reply_without_the_fields_is_unread_not_unsafe() {
        let found = redis_info("# Server\r\nredis_version:7.0.15\r\n");
        assert!(found.settings.findings.is_empty());
        assert!(found.settings.unread.is_some());
    }

    #[test]
    fn asynchronous_commit_is_unsafe_and_fsync_off_not_durable() {
        assert_eq!(postgres_settings("on", "on"), Settings::default());
        assert_eq!(postgres_settings("local", "on"), Settings::default());
        let found = postgres_settings("off", "off");
        assert_eq!(
            found
                .unsafe_findings()
                .map(|f| f.setting)
                .collect::<Vec<_>>(),
            [Setting::SynchronousCommit]
        );
        assert!(found.has(Setting::Fsync));
    }
}
