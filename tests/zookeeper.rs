//! The ZooKeeper harness itself (tests/harness/src/zookeeper.rs), against
//! real servers from Debian's `zookeeper` package, through the four-letter
//! words over TCP and one raw `create` (no ZooKeeper client yet): a
//! standalone server answers `ruok` and says it is standalone; a restart
//! keeps its data and its zxid does not go back, a wipe starts it over; an
//! ensemble of three elects exactly one leader, elects another when the
//! leader is killed, and takes the killed one back as a follower with the
//! data written meanwhile.
//!
//! The ignored `start_times_and_memory` measures the figures of the
//! harness's doc comment: `cargo nextest run --test zookeeper
//! --run-ignored only --no-capture`.

use leasehold_testkit as common;

use std::time::{Duration, Instant};

use common::{
    zookeeper::{create_node, four_letter_word, Mode},
    ZooKeeperEnsemble, ZooKeeperServer,
};

#[test]
fn a_standalone_server_answers_ruok_and_says_standalone() {
    let zk = ZooKeeperServer::start();
    assert_eq!(four_letter_word(zk.port(), "ruok").unwrap(), "imok");
    let status = zk.srvr();
    assert_eq!(status.mode, Mode::Standalone, "{status:?}");
    assert!(status.version.starts_with("3.8."), "{status:?}");
    assert_eq!(status.zxid, 0, "a fresh server: {status:?}");
    assert_eq!(zk.connect_string(), format!("127.0.0.1:{}", zk.port()));
    assert_eq!(zk.url(), format!("zookeeper://127.0.0.1:{}", zk.port()));
    // Its zoo.cfg's settings.
    let conf = four_letter_word(zk.port(), "conf").unwrap();
    assert!(conf.contains("tickTime=200"), "{conf}");
}

#[test]
fn a_restart_keeps_the_data_and_a_wipe_starts_over() {
    let mut zk = ZooKeeperServer::start();
    let fresh = zk.srvr();
    let created = create_node(zk.port(), "/leasehold-harness").expect("create a znode");
    let written = zk.srvr();
    assert!(
        written.zxid >= created && created > fresh.zxid,
        "{written:?}"
    );
    assert_eq!(written.node_count, fresh.node_count + 1, "{written:?}");

    // Killed (SIGKILL) right after the writes: what it logged survives.
    zk.restart();
    let restarted = zk.srvr();
    assert_eq!(restarted.mode, Mode::Standalone);
    assert!(
        restarted.zxid >= written.zxid,
        "the zxid went back over a restart: {written:?} then {restarted:?}"
    );
    assert_eq!(restarted.node_count, written.node_count, "{restarted:?}");
    assert!(
        create_node(zk.port(), "/leasehold-harness").is_err(),
        "the znode is still there"
    );

    // Stopped (SIGTERM): down until restarted, its data kept.
    zk.stop();
    assert!(
        four_letter_word(zk.port(), "ruok").is_err(),
        "a stopped server answers"
    );
    zk.restart();
    assert_eq!(zk.srvr().node_count, written.node_count);

    zk.wipe();
    let wiped = zk.srvr();
    assert_eq!(wiped.zxid, 0, "a wiped server starts over: {wiped:?}");
    assert_eq!(wiped.node_count, fresh.node_count, "{wiped:?}");
}

#[test]
fn an_ensemble_elects_one_leader_and_another_when_it_is_killed() {
    let mut zk = ZooKeeperEnsemble::start(3);
    assert_eq!(zk.members(), 0..3);
    assert_eq!(zk.connect_string().split(',').count(), 3);
    let leader = zk.leader();
    let modes: Vec<Mode> = zk.members().map(|i| zk.srvr(i).unwrap().mode).collect();
    assert_eq!(
        modes.iter().filter(|m| **m == Mode::Leader).count(),
        1,
        "{modes:?}"
    );
    assert_eq!(
        modes.iter().filter(|m| **m == Mode::Follower).count(),
        2,
        "{modes:?}"
    );

    // Written through a follower (it forwards to the leader).
    let follower = (leader + 1) % 3;
    create_node(zk.port(follower), "/before").expect("create through a follower");

    zk.kill(leader);
    let began = Instant::now();
    let next = zk.leader();
    let elected_in = began.elapsed();
    assert_ne!(next, leader);
    eprintln!("member {leader} killed, member {next} elected in {elected_in:?}");
    let after = create_node(zk.port(next), "/after").expect("the two left have a quorum");

    zk.restart(leader);
    assert_eq!(zk.leader(), next, "the restarted member took the lead back");
    let rejoined = zk.srvr(leader).expect("the restarted member serves");
    assert_eq!(rejoined.mode, Mode::Follower);
    // It caught up with what was written while it was down.
    assert!(rejoined.zxid >= after, "{rejoined:?}");
    assert_eq!(
        rejoined.node_count,
        zk.srvr(next).unwrap().node_count,
        "{rejoined:?}"
    );
}

/// The figures of tests/harness/src/zookeeper.rs's doc comment: three
/// standalone starts and three ensembles of three, each timed from spawn
/// to serving, with the JVMs' resident memory then.
#[test]
#[ignore = "a measurement, not a check: run with --run-ignored only --no-capture"]
fn start_times_and_memory() {
    fn rss_mb(pid: u32) -> f64 {
        let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
        let kb: f64 = status
            .lines()
            .find_map(|l| l.strip_prefix("VmRSS:"))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap();
        kb / 1024.0
    }
    fn spread(mut values: Vec<f64>) -> String {
        values.sort_by(f64::total_cmp);
        format!(
            "min {:.2} / median {:.2} / max {:.2}",
            values[0],
            values[values.len() / 2],
            values[values.len() - 1]
        )
    }
    let (mut times, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let began = Instant::now();
        let zk = ZooKeeperServer::start();
        times.push(began.elapsed().as_secs_f64());
        rss.push(rss_mb(zk.pid()));
    }
    println!(
        "standalone: start s {}; RSS MB {}",
        spread(times),
        spread(rss)
    );
    let (mut times, mut rss) = (Vec::new(), Vec::new());
    for _ in 0..3 {
        let began = Instant::now();
        let zk = ZooKeeperEnsemble::start(3);
        times.push(began.elapsed().as_secs_f64());
        rss.push(zk.members().map(|i| rss_mb(zk.pid(i).unwrap())).sum());
        // Settled: the RSS a few seconds on, sessions and pings running.
        std::thread::sleep(Duration::from_secs(3));
        let settled: f64 = zk.members().map(|i| rss_mb(zk.pid(i).unwrap())).sum();
        println!("ensemble RSS 3 s after start: {settled:.0} MB");
    }
    println!(
        "ensemble of 3: start s {}; RSS MB (3 JVMs) {}",
        spread(times),
        spread(rss)
    );
}
