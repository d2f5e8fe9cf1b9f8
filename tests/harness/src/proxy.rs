//! A TCP fault-injection proxy on loopback: put it between a client and a
//! broker (or a broker and Redis) to stall, cut or slow the network under a
//! test without touching either end.

use std::{
    net::SocketAddr,
    sync::{
        atomic::{AtomicUsize, Ordering},
        Arc,
    },
    time::Duration,
};

use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{
        tcp::{OwnedReadHalf, OwnedWriteHalf},
        TcpListener, TcpStream,
    },
    sync::watch,
    task::{JoinHandle, JoinSet},
    time::Instant,
};

/// Bytes read per chunk, per direction, per connection: the proxy never
/// holds more than this in user space for one direction, so a stalled or
/// slow peer pushes back through TCP instead of growing a buffer.
const CHUNK: usize = 16 * 1024;

/// What every forwarding task obeys. Held in a `watch` channel so a change
/// reaches tasks blocked in a read, a write or a latency sleep at once.
#[derive(Clone, Copy, Debug)]
struct Control {
    /// Stop moving bytes (see [`Proxy::stall`]).
    stalled: bool,
    /// Stop moving bytes from upstream only (see [`Proxy::hold_answers`]).
    answers_held: bool,
    /// Stop moving bytes to upstream on the connections accepted before
    /// this many (see [`Proxy::hold_requests_of_open_connections`]).
    requests_held_below: usize,
    /// Delay added to every chunk (see [`Proxy::set_latency`]).
    latency: Duration,
    /// Bumped by [`Proxy::drop_connections`]: a connection accepted under an
    /// older generation closes.
    generation: u64,
}

/// A loopback TCP proxy to one upstream address, with switchable faults.
/// Starts in pass mode with no latency; dropping it closes the listener and
/// every connection.
pub struct Proxy {
    addr: SocketAddr,
    control: watch::Sender<Control>,
    accepted: Arc<AtomicUsize>,
    /// The accept loop; it owns the connection tasks (a `JoinSet`), so
    /// aborting it aborts them too.
    task: JoinHandle<()>,
}

impl Proxy {
    /// Listens on 127.0.0.1:0 and forwards every accepted connection to
    /// `upstream` (connected afresh for each client connection).
    pub async fn start(upstream: SocketAddr) -> Proxy {
        let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind proxy");
        let addr = listener.local_addr().expect("proxy address");
        let (control, rx) = watch::channel(Control {
            stalled: false,
            answers_held: false,
            requests_held_below: 0,
            latency: Duration::ZERO,
            generation: 0,
        });
        let accepted = Arc::new(AtomicUsize::new(0));
        let task = tokio::spawn(accept_loop(listener, upstream, rx, accepted.clone()));
        Proxy {
            addr,
            control,
            accepted,
            task,
        }
    }

    /// The address clients should connect to.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Forwards bytes normally (the initial mode); bytes held back by
    /// [`stall`](Self::stall) flow again.
    pub fn pass(&self) {
        self.control.send_modify(|c| {
            c.stalled = false;
            c.answers_held = false;
            c.requests_held_below = 0;
        });
    }

    /// Like [`stall`](Self::stall) in one direction only: requests still
    /// reach upstream (and are served there), their answers wait until
    /// [`pass`](Self::pass). A client then sees a timeout for a request
    /// that did take effect.
    pub fn hold_answers(&self) {
        self.control.send_modify(|c| c.answers_held = true);
    }

    /// Holds the bytes clients send on the connections open now (they wait
    /// in the proxy, in order, until [`pass`](Self::pass)), while
    /// connections opened later, and every answer, pass: a request delayed
    /// on its way to upstream on one path (a congested or retransmitting
    /// link, a queue in a middlebox), reaching upstream after the client
    /// gave up on it and went on over another connection.
    pub fn hold_requests_of_open_connections(&self) {
        let open = self.accepted.load(Ordering::SeqCst);
        self.control.send_modify(|c| c.requests_held_below = open);
    }

    /// A black hole: stops forwarding in both directions, on existing and new
    /// connections, but keeps every socket open (no FIN, no RST), like a
    /// network that silently stopped delivering. The proxy stops reading, so
    /// bytes sent meanwhile wait in kernel buffers (and TCP backpressure
    /// eventually blocks the senders); they are not lost: [`pass`](Self::pass)
    /// delivers them, in order. New connections are still accepted (the
    /// kernel completes the handshake anyway) and connected upstream, but
    /// carry nothing.
    pub fn stall(&self) {
        self.control.send_modify(|c| c.stalled = true);
    }

    /// Closes every open connection at once by dropping both of its sockets
    /// (the peers see EOF, or a reset if they had unread data in flight), and
    /// keeps accepting new ones. Works in stall mode too.
    pub fn drop_connections(&self) {
        self.control.send_modify(|c| c.generation += 1);
    }

    /// Delays every chunk forwarded, in both directions, by `d`
    /// (`Duration::ZERO` removes the delay). A direction carries one chunk at
    /// a time, so this also caps its throughput at 16 KiB per `d`: irrelevant
    /// for small RPCs, which then see `2 * d` more round-trip time.
    pub fn set_latency(&self, d: Duration) {
        self.control.send_modify(|c| c.latency = d);
    }

    /// Number of connections accepted so far (including dropped ones): to
    /// check that a client reconnected, or did not.
    pub fn connections(&self) -> usize {
        self.accepted.load(Ordering::SeqCst)
    }
}

impl Drop for Proxy {
    /// Stops the accept loop and, with it, every connection task (their
    /// sockets close). Dropping `control` would end them too, a moment later.
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Accepts connections until aborted, one task per connection, reaping
/// finished tasks so a long test does not accumulate them.
async fn accept_loop(
    listener: TcpListener,
    upstream: SocketAddr,
    control: watch::Receiver<Control>,
    accepted: Arc<AtomicUsize>,
) {
    let mut connections = JoinSet::new();
    loop {
        tokio::select! {
            incoming = listener.accept() => match incoming {
                Ok((client, _)) => {
                    let index = accepted.fetch_add(1, Ordering::SeqCst);
                    let generation = control.borrow().generation;
                    connections.spawn(connection(client, upstream, control.clone(), generation, index));
                }
                // Out of file descriptors and the like: back off instead of
                // spinning on the same error.
                Err(_) => tokio::time::sleep(Duration::from_millis(10)).await,
            },
            Some(_) = connections.join_next(), if !connections.is_empty() => {}
        }
    }
}

/// One proxied connection: connects to `upstream`, then pumps both ways
/// until both sides have closed, either side fails, or the connection's
/// `generation` is dropped. Returning drops both sockets.
async fn connection(
    client: TcpStream,
    upstream: SocketAddr,
    mut control: watch::Receiver<Control>,
    generation: u64,
    index: usize,
) {
    let server = tokio::select! {
        server = TcpStream::connect(upstream) => match server {
            Ok(server) => server,
            Err(_) => return,
        },
        () = dropped(&mut control, generation) => return,
    };
    // Chunks are forwarded as soon as they are read; Nagle would hold small
    // ones back waiting for an ACK.
    let _ = client.set_nodelay(true);
    let _ = server.set_nodelay(true);
    let (client_read, client_write) = client.into_split();
    let (server_read, server_write) = server.into_split();
    let up = pump(
        client_read,
        server_write,
        control.clone(),
        (generation, index),
        false,
    );
    let down = pump(
        server_read,
        client_write,
        control,
        (generation, index),
        true,
    );
    tokio::pin!(up, down);
    // A clean EOF is a half-close, passed on, and the other direction may go
    // on; anything else ends the whole connection.
    tokio::select! {
        clean = &mut up => if clean { down.await; },
        clean = &mut down => if clean { up.await; },
    }
}

/// Resolves once `generation` is no longer current (or the proxy is gone).
async fn dropped(control: &mut watch::Receiver<Control>, generation: u64) {
    let _ = control.wait_for(|c| c.generation != generation).await;
}

/// Waits, without polling, until the connection (its generation and its
/// index among those accepted) may move bytes (`answers`: those from
/// upstream): `true` once the proxy passes, `false` if the connection was
/// dropped meanwhile.
async fn may_forward(
    control: &mut watch::Receiver<Control>,
    (generation, index): (u64, usize),
    answers: bool,
) -> bool {
    match control
        .wait_for(|c| {
            c.generation != generation
                || !(c.stalled
                    || answers && c.answers_held
                    || !answers && index < c.requests_held_below)
        })
        .await
    {
        Ok(c) => c.generation == generation,
        Err(_) => false,
    }
}

/// Copies `from` to `to` one chunk at a time, obeying `control` between and
/// during reads, latency sleeps and writes (`answers`: `from` is upstream).
/// Returns `true` on a clean EOF (after half-closing `to`), `false` on an
/// error or a drop.
async fn pump(
    mut from: OwnedReadHalf,
    mut to: OwnedWriteHalf,
    mut control: watch::Receiver<Control>,
    (generation, index): (u64, usize),
    answers: bool,
) -> bool {
    let mut buf = vec![0u8; CHUNK];
    loop {
        // Read a chunk, only while passing. A read cancelled by a control
        // change has consumed nothing (`TcpStream` reads are cancel-safe).
        let n = loop {
            if !may_forward(&mut control, (generation, index), answers).await {
                return false;
            }
            tokio::select! {
                read = from.read(&mut buf) => match read {
                    Ok(0) => return to.shutdown().await.is_ok(),
                    Ok(n) => break n,
                    Err(_) => return false,
                },
                changed = control.changed() => if changed.is_err() {
                    return false;
                },
            }
        };

        // Delay it by the latency in force when it was read.
        let latency = control.borrow().latency;
        if !latency.is_zero() {
            let deadline = Instant::now() + latency;
            tokio::select! {
                () = tokio::time::sleep_until(deadline) => {}
                () = dropped(&mut control, generation) => return false,
            }
        }

        // Write it, holding the rest back if a stall starts half-way.
        let mut sent = 0;
        while sent < n {
            if !may_forward(&mut control, (generation, index), answers).await {
                return false;
            }
            tokio::select! {
                written = to.write(&buf[sent..n]) => match written {
                    Ok(0) | Err(_) => return false,
                    Ok(k) => sent += k,
                },
                changed = control.changed() => if changed.is_err() {
                    return false;
                },
            }
        }
    }
}
