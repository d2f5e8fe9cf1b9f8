//! Leader election: candidates as real processes, a leader killed with
//! SIGKILL, a new leader within the TTL, terms strictly increasing, and an
//! observer that sees every change in order.

use leasehold_testkit as common;

use std::{
    process::Stdio,
    time::{Duration, Instant},
};

use common::{Broker, EtcdServer, PostgresServer, RedisServer};
use leasehold_client::{AcquireOptions, Client, LeaderInfo};
use tokio::{
    io::{AsyncBufReadExt, BufReader, Lines},
    process::{Child, ChildStdout, Command},
};

struct Candidate {
    value: String,
    child: Child,
    out: Lines<BufReader<ChildStdout>>,
}

fn candidate(broker: &Broker, value: &str) -> Candidate {
    let mut child = Command::new(env!("CARGO_BIN_EXE_leasehold"))
        .args([
            "elect",
            "--election",
            "svc/primary",
            "--value",
            value,
            "--ttl",
            "1s",
            "--wait",
            "60s",
        ])
        .env("LEASEHOLD_BROKER", broker.url())
        .stdout(Stdio::piped())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let out = BufReader::new(child.stdout.take().unwrap()).lines();
    Candidate {
        value: value.into(),
        child,
        out,
    }
}

/// The next leader (skipping "no leader" events, which may or may not show
/// between two leaders); every event is recorded.
async fn next_leader(
    observation: &mut leasehold_client::Observation,
    seen: &mut Vec<Option<LeaderInfo>>,
) -> LeaderInfo {
    loop {
        let change = tokio::time::timeout(Duration::from_secs(10), observation.next())
            .await
            .expect("a change within 10 s")
            .expect("the stream goes on")
            .expect("no error");
        seen.push(change.clone());
        if let Some(leader) = change {
            return leader;
        }
    }
}

#[tokio::test]
async fn leaders_follow_each_other_and_observers_see_every_change() {
    let redis = RedisServer::start();
    leaders_follow_each_other_on(&redis.url(), Duration::from_millis(2_500)).await;
}

/// The same on PostgreSQL (grants and releases reach the observer by
/// NOTIFY).
#[tokio::test]
async fn leaders_follow_each_other_and_observers_see_every_change_on_postgres() {
    let postgres = PostgresServer::start();
    leaders_follow_each_other_on(&postgres.url(), Duration::from_millis(2_500)).await;
}

/// The same on etcd (grants and releases reach the observer on its Watch
/// stream). The killed leader's lease is etcd's: whole seconds, revoked by
/// etcd's leader up to half a second after it expired, so the next leader
/// comes later than on the other stores.
#[tokio::test]
async fn leaders_follow_each_other_and_observers_see_every_change_on_etcd() {
    let etcd = EtcdServer::start();
    leaders_follow_each_other_on(&etcd.store_url(), Duration::from_millis(4_000)).await;
}

/// Leaders follow each other on `store`; a killed leader's successor is
/// elected within `takeover` (its lease's TTL is 1 s).
async fn leaders_follow_each_other_on(store: &str, takeover: Duration) {
    let broker = Broker::start(store).await;
    let client = Client::connect(broker.url()).await.unwrap();
    let mut observation = client.observe("svc/primary").await.unwrap();
    let mut seen = Vec::new();
    let first = observation.next().await.unwrap().unwrap();
    assert_eq!(first, None, "no leader before any campaign");
    seen.push(first);

    let mut candidates: Vec<Candidate> = ["cand-a", "cand-b", "cand-c"]
        .iter()
        .map(|v| candidate(&broker, v))
        .collect();
    let mut leader = next_leader(&mut observation, &mut seen).await;
    let mut terms = vec![leader.term];
    for round in 0..3 {
        assert_eq!(
            client.leader("svc/primary").await.unwrap().as_ref(),
            Some(&leader)
        );
        let index = candidates
            .iter()
            .position(|c| c.value == leader.value)
            .expect("a candidate leads");
        let mut elected = candidates.remove(index);
        let line = elected.out.next_line().await.unwrap().unwrap();
        assert!(
            line.starts_with(&format!(
                "elected election=svc/primary value={:?} term={}",
                leader.value, leader.term
            )),
            "{line} vs term {}",
            leader.term
        );
        // Then its status lines, in the same words.
        let line = elected.out.next_line().await.unwrap().unwrap();
        assert!(
            line.starts_with(&format!(
                "leading election=svc/primary term={} valid_for_ms=",
                leader.term
            )),
            "{line} vs term {}",
            leader.term
        );
        if round < 2 {
            // Kill the leader: the next one takes over when its lease expires.
            elected.child.start_kill().unwrap();
            elected.child.wait().await.unwrap();
            let killed = Instant::now();
            leader = next_leader(&mut observation, &mut seen).await;
            assert!(
                killed.elapsed() < takeover,
                "new leader {:?} after the kill (TTL 1 s)",
                killed.elapsed()
            );
            terms.push(leader.term);
        } else {
            // The last leader resigns (SIGTERM releases): observers see no
            // leader at once.
            // SAFETY: kill() has no memory-safety preconditions.
            unsafe { libc::kill(elected.child.id().unwrap().cast_signed(), libc::SIGTERM) };
            let resigned = Instant::now();
            let change = tokio::time::timeout(Duration::from_secs(5), observation.next())
                .await
                .unwrap()
                .unwrap()
                .unwrap();
            assert_eq!(change, None);
            assert!(
                resigned.elapsed() < Duration::from_millis(900),
                "resignation seen after {:?}",
                resigned.elapsed()
            );
            seen.push(change);
            // ...and the candidate says so in an election's words.
            let said = tokio::time::timeout(Duration::from_secs(5), async {
                while let Some(line) = elected.out.next_line().await.unwrap() {
                    if !line.starts_with("leading ") {
                        return line;
                    }
                }
                "(end of output)".to_owned()
            })
            .await
            .expect("a line within 5 s");
            assert_eq!(said, "resigned election=svc/primary");
        }
    }
    assert!(
        terms.windows(2).all(|w| w[1] > w[0]),
        "terms did not strictly increase: {terms:?}"
    );
    let leaders: Vec<u64> = seen.iter().flatten().map(|l| l.term).collect();
    assert!(
        leaders.windows(2).all(|w| w[1] > w[0]),
        "observed out of order: {seen:?}"
    );
    // Someone can campaign again after all that.
    let lease = client
        .campaign("svc/primary", "in-test", AcquireOptions::new())
        .await
        .unwrap();
    assert!(lease.fence() > *terms.last().unwrap());
}

/// The election RPCs as other languages call them: Campaign, Leader,
/// Resign; a second candidate that does not wait is refused.
#[tokio::test]
async fn campaign_leader_and_resign_over_grpc() {
    use leasehold_server::proto::{CampaignRequest, LeaderRequest, ResignRequest};
    let broker = Broker::start("memory").await;
    let mut grpc = broker.client().await;
    let campaign = |value: &str| CampaignRequest {
        election: "jobs/scheduler".into(),
        value: value.into(),
        ttl_ms: 5_000,
        wait_timeout_ms: 0,
        ..Default::default()
    };
    let lease = grpc
        .campaign(campaign("10.0.0.7:8080"))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    let leader = grpc
        .leader(LeaderRequest {
            election: "jobs/scheduler".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(leader.present);
    assert_eq!(
        (leader.value.as_str(), leader.term),
        ("10.0.0.7:8080", lease.fence)
    );
    let status = grpc.campaign(campaign("10.0.0.8:8080")).await.unwrap_err();
    assert_eq!(status.code(), tonic::Code::Aborted);
    assert!(
        status.message().contains("10.0.0.7:8080"),
        "{}",
        status.message()
    );

    grpc.resign(ResignRequest {
        election: "jobs/scheduler".into(),
        owner_token: lease.owner_token,
    })
    .await
    .unwrap();
    let leader = grpc
        .leader(LeaderRequest {
            election: "jobs/scheduler".into(),
        })
        .await
        .unwrap()
        .into_inner();
    assert!(!leader.present);
    let next = grpc
        .campaign(campaign("10.0.0.8:8080"))
        .await
        .unwrap()
        .into_inner()
        .lease
        .unwrap();
    assert!(next.fence > lease.fence, "terms increase");
}
