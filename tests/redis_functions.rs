//! How the broker runs its Lua on Redis: as the functions of one library
//! per record format (`FCALL`), loaded once per Redis and again whenever
//! Redis lost it; as scripts (`EVALSHA`) where Redis refuses functions (an
//! ACL user without them; Redis before 7). Counted from Redis's own
//! `INFO commandstats`.

use leasehold_testkit as common;

use std::time::Duration;

use common::RedisServer;
use leasehold_server::store::{Acquired, Checked, GrantSpec, RecordFormat, Store, StoreOptions};

fn open(url: &str, format: RecordFormat) -> Store {
    let mut options = StoreOptions::new("fn:", Duration::from_secs(2));
    options.record_format = format;
    Store::open(url, &options).unwrap()
}

/// A 5 s lock on `name` for `token`.
fn spec(name: &str, token: &str) -> GrantSpec {
    GrantSpec {
        name: name.into(),
        token: token.into(),
        holder: "h".into(),
        ttl_ms: 5_000,
        lock_delay_ms: 0,
        limit: 1,
        queued: false,
    }
}

/// Takes and gives back `name` `times` times.
async fn cycles(store: &Store, name: &str, times: usize) {
    for i in 0..times {
        let token = format!("{name}-{i}");
        assert!(matches!(
            store.acquire(&spec(name, &token)).await.unwrap(),
            Acquired::Granted { .. }
        ));
        assert_eq!(
            store.release(name, &token).await.unwrap(),
            Checked::Done(())
        );
    }
}

/// Calls of `command` (as `INFO commandstats` names it: `fcall`,
/// `evalsha`, `function|load`) Redis served.
async fn calls(conn: &mut redis::aio::MultiplexedConnection, command: &str) -> u64 {
    let info: String = redis::cmd("INFO")
        .arg("commandstats")
        .query_async(conn)
        .await
        .unwrap();
    info.lines()
        .find_map(|l| l.strip_prefix(&format!("cmdstat_{command}:calls=")))
        .map_or(0, |rest| rest.split(',').next().unwrap().parse().unwrap())
}

/// The libraries Redis holds, by name.
async fn libraries(conn: &mut redis::aio::MultiplexedConnection) -> Vec<String> {
    let list: Vec<redis::Value> = redis::cmd("FUNCTION")
        .arg("LIST")
        .query_async(conn)
        .await
        .unwrap();
    let mut names: Vec<String> = list
        .iter()
        .filter_map(|library| match library {
            redis::Value::Map(fields) => fields.iter().find_map(|(k, v)| match (k, v) {
                (redis::Value::BulkString(k), redis::Value::BulkString(v))
                    if k.as_slice() == b"library_name" =>
                {
                    Some(String::from_utf8_lossy(v).into_owned())
                }
                _ => None,
            }),
            redis::Value::Array(fields) => fields.chunks(2).find_map(|pair| match pair {
                [redis::Value::BulkString(k), redis::Value::BulkString(v)]
                    if k.as_slice() == b"library_name" =>
                {
                    Some(String::from_utf8_lossy(v).into_owned())
                }
                _ => None,
            }),
            _ => None,
        })
        .collect();
    names.sort();
    names
}

/// Every call is an `FCALL` of a library loaded once; a second record
/// format's library goes beside it, never replacing it.
#[tokio::test]
async fn the_scripts_run_as_functions_of_a_library_loaded_once() {
    let redis = RedisServer::start();
    let mut conn = redis.connection().await;
    let store = open(&redis.url(), RecordFormat::V2);
    cycles(&store, "a", 20).await;
    assert_eq!(calls(&mut conn, "function|load").await, 1);
    assert!(calls(&mut conn, "fcall").await >= 40);
    assert_eq!(calls(&mut conn, "evalsha").await, 0);
    let first = libraries(&mut conn).await;
    assert_eq!(first.len(), 1, "{first:?}");
    assert!(first[0].starts_with("leasehold_"), "{first:?}");

    let other = open(&redis.url(), RecordFormat::V1);
    cycles(&other, "b", 5).await;
    cycles(&store, "a", 5).await;
    assert_eq!(libraries(&mut conn).await.len(), 2);
    assert_eq!(calls(&mut conn, "function|load").await, 2);
}

/// A Redis that lost the library (restarted without persistence, or an
/// operator's `FUNCTION FLUSH`) gets it again from the next call, which
/// succeeds.
#[tokio::test]
async fn a_redis_that_lost_the_library_is_given_it_again() {
    let redis = RedisServer::start();
    let mut conn = redis.connection().await;
    let store = open(&redis.url(), RecordFormat::V2);
    cycles(&store, "a", 3).await;
    let _: () = redis::cmd("FUNCTION")
        .arg("FLUSH")
        .query_async(&mut conn)
        .await
        .unwrap();
    assert!(libraries(&mut conn).await.is_empty());
    cycles(&store, "a", 3).await;
    assert_eq!(calls(&mut conn, "function|load").await, 2);
    assert_eq!(libraries(&mut conn).await.len(), 1);
    assert_eq!(calls(&mut conn, "evalsha").await, 0);
}

/// An ACL user that may not load or call functions: the broker sends the
/// scripts instead, and the contract holds as ever.
#[tokio::test]
async fn a_user_without_functions_is_sent_scripts() {
    let redis = RedisServer::start();
    let mut conn = redis.connection().await;
    let _: () = redis::cmd("ACL")
        .arg(&[
            "SETUSER",
            "scripts",
            "on",
            ">secret",
            "~*",
            "&*",
            "+@all",
            "-function",
            "-fcall",
            "-fcall_ro",
        ])
        .query_async(&mut conn)
        .await
        .unwrap();
    let url = format!("redis://scripts:secret@127.0.0.1:{}", redis.port());
    let store = open(&url, RecordFormat::V2);
    cycles(&store, "a", 20).await;
    assert!(calls(&mut conn, "evalsha").await >= 40);
    assert_eq!(calls(&mut conn, "fcall").await, 0);
    assert!(libraries(&mut conn).await.is_empty());
    // A name held is held, as through functions.
    assert!(matches!(
        store.acquire(&spec("a", "t1")).await.unwrap(),
        Acquired::Granted { .. }
    ));
    assert!(matches!(
        store.acquire(&spec("a", "t2")).await.unwrap(),
        Acquired::Blocked(_)
    ));
}

/// A Redis at its `maxmemory` (`noeviction`): a grant is refused, with
/// nothing written; a holder still renews its lease and gives it back,
/// and the name can be described; once Redis has room, grants resume.
#[tokio::test]
async fn a_full_redis_refuses_grants_but_keeps_and_ends_leases() {
    let redis = RedisServer::start();
    let mut conn = redis.connection().await;
    let store = open(&redis.url(), RecordFormat::V2);
    for (name, token) in [("kept", "t1"), ("given-back", "t2")] {
        assert!(matches!(
            store.acquire(&spec(name, token)).await.unwrap(),
            Acquired::Granted { .. }
        ));
    }
    let full = |bytes: u64| {
        redis::cmd("CONFIG")
            .arg("SET")
            .arg("maxmemory")
            .arg(bytes)
            .to_owned()
    };
    // One byte: Redis is past it whatever it holds.
    let _: () = full(1).query_async(&mut conn).await.unwrap();

    let refused = store.acquire(&spec("new", "t3")).await.unwrap_err();
    assert!(
        refused.to_string().contains("OOM"),
        "a grant on a full Redis: {refused}"
    );
    assert!(matches!(
        store.renew("kept", "t1", None).await.unwrap(),
        Checked::Done(_)
    ));
    assert_eq!(
        store.release("given-back", "t2").await.unwrap(),
        Checked::Done(())
    );
    assert!(store.describe("kept").await.unwrap().lease.is_some());
    assert!(store.describe("new").await.unwrap().lease.is_none());

    let _: () = full(0).query_async(&mut conn).await.unwrap();
    assert!(matches!(
        store.acquire(&spec("new", "t3")).await.unwrap(),
        Acquired::Granted { .. }
    ));
}
