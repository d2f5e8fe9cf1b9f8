//! A KeepAlive stream as a test drives it: one heartbeat at a time, each
//! answer matched to its heartbeat, and the ways a stream can end (a clean
//! half-close, a reset by the client, a broken connection through a
//! [`crate::proxy::Proxy`]).

use leasehold_server::proto::{
    leasehold_service_client::LeaseholdServiceClient, KeepAliveRequest, KeepAliveResponse, Lease,
    LeaseRef,
};
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tonic::{transport::Channel, Streaming};

/// A KeepAlive stream seen from the client.
pub struct Stream {
    /// The heartbeats' sender: dropped, the client half-closes the stream.
    pub tx: mpsc::Sender<KeepAliveRequest>,
    /// The answers: dropped while `tx` lives, the client resets the stream
    /// (RST_STREAM CANCEL, as a client's cancel does).
    pub rx: Streaming<KeepAliveResponse>,
    seq: u64,
}

impl Stream {
    /// Opens a stream on `client`.
    pub async fn open(client: &mut LeaseholdServiceClient<Channel>) -> Stream {
        let (tx, rx) = mpsc::channel(16);
        let rx = client
            .keep_alive(ReceiverStream::new(rx))
            .await
            .expect("stream")
            .into_inner();
        Stream { tx, rx, seq: 0 }
    }

    /// Sends one heartbeat naming `(name, token)` pairs and returns its
    /// answer (or the status the stream ended with).
    pub async fn beat(
        &mut self,
        leases: &[(&str, &str)],
    ) -> Result<KeepAliveResponse, tonic::Status> {
        self.seq += 1;
        let leases = leases
            .iter()
            .map(|(name, token)| LeaseRef {
                name: (*name).into(),
                owner_token: (*token).into(),
                ttl_ms: 0,
                ..Default::default()
            })
            .collect();
        self.tx
            .send(KeepAliveRequest {
                seq: self.seq,
                leases,
                ..Default::default()
            })
            .await
            .expect("send");
        let response = self.rx.message().await?.expect("a response");
        assert_eq!(response.seq, self.seq);
        Ok(response)
    }

    /// Sends one heartbeat of `leases` that reports the round trip of this
    /// stream's previous one (`last_round_trip_us`), as the clients do, and
    /// returns its answer and its own round trip.
    pub async fn beat_reporting(
        &mut self,
        leases: Vec<LeaseRef>,
        last_round_trip: std::time::Duration,
    ) -> Result<(KeepAliveResponse, std::time::Duration), tonic::Status> {
        self.seq += 1;
        let sent = std::time::Instant::now();
        self.tx
            .send(KeepAliveRequest {
                seq: self.seq,
                leases,
                last_round_trip_us: u64::try_from(last_round_trip.as_micros()).unwrap_or(u64::MAX),
            })
            .await
            .expect("send");
        let response = self.rx.message().await?.expect("a response");
        assert_eq!(response.seq, self.seq);
        Ok((response, sent.elapsed()))
    }

    /// Resets the stream, as a client that cancels it does (the answers'
    /// side dropped first, then the heartbeats').
    pub fn reset(self) {
        let Stream { tx, rx, .. } = self;
        drop(rx);
        drop(tx);
    }
}

/// A client whose connection to `broker` runs through a proxy the test can
/// cut (`drop_connections`: the network breaks under its streams).
pub async fn through_proxy(
    broker: &crate::Broker,
) -> (LeaseholdServiceClient<Channel>, crate::proxy::Proxy) {
    let proxy = crate::proxy::Proxy::start(broker.addr).await;
    let channel = Channel::from_shared(format!("http://{}", proxy.addr()))
        .expect("a URL")
        .connect()
        .await
        .expect("connect through the proxy");
    (LeaseholdServiceClient::new(channel), proxy)
}

/// A lease's `(name, owner token)`, as a heartbeat names it.
pub fn pair(lease: &Lease) -> (&str, &str) {
    (lease.name.as_str(), lease.owner_token.as_str())
}
