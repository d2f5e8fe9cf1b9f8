//! The fault-injection proxy itself, against a plain TCP echo server: it
//! passes bytes, stalls without closing, drops connections and keeps
//! accepting, and delays chunks.

use leasehold_testkit as common;

use std::{
    net::SocketAddr,
    time::{Duration, Instant},
};

use common::proxy::Proxy;
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
    time::timeout,
};

/// An echo server on 127.0.0.1:0, serving until the test's runtime ends.
async fn echo_server() -> SocketAddr {
    let listener = TcpListener::bind("127.0.0.1:0").await.expect("bind echo");
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut stream, _)) = listener.accept().await {
            tokio::spawn(async move {
                let (mut read, mut write) = stream.split();
                let _ = tokio::io::copy(&mut read, &mut write).await;
            });
        }
    });
    addr
}

/// Writes `msg` and reads back exactly as many bytes, within 2 s.
async fn echo(stream: &mut TcpStream, msg: &[u8]) {
    stream.write_all(msg).await.expect("write");
    let mut back = vec![0; msg.len()];
    timeout(Duration::from_secs(2), stream.read_exact(&mut back))
        .await
        .expect("echo within 2 s")
        .expect("read echo");
    assert_eq!(back, msg);
}

#[tokio::test]
async fn pass_mode_echoes() {
    let proxy = Proxy::start(echo_server().await).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    echo(&mut stream, b"hello").await;
    // More than one 16 KiB chunk, to cross chunk boundaries.
    let big: Vec<u8> = (0..=u8::MAX).cycle().take(100_000).collect();
    echo(&mut stream, &big).await;
    assert_eq!(proxy.connections(), 1);
}

#[tokio::test]
async fn stall_holds_bytes_without_closing() {
    let proxy = Proxy::start(echo_server().await).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    echo(&mut stream, b"before").await;

    proxy.stall();
    stream
        .write_all(b"during")
        .await
        .expect("write while stalled");
    let mut back = [0; 6];
    // Neither an echo nor EOF nor an error: the read just waits.
    assert!(
        timeout(Duration::from_millis(300), stream.read(&mut back))
            .await
            .is_err(),
        "the stalled proxy delivered something"
    );

    proxy.pass();
    timeout(Duration::from_secs(2), stream.read_exact(&mut back))
        .await
        .expect("held bytes delivered after pass")
        .expect("read echo");
    assert_eq!(&back, b"during");
    echo(&mut stream, b"after").await;
}

#[tokio::test]
async fn drop_connections_closes_and_keeps_accepting() {
    let proxy = Proxy::start(echo_server().await).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    echo(&mut stream, b"hello").await;

    proxy.drop_connections();
    let mut buf = [0; 16];
    match timeout(Duration::from_secs(2), stream.read(&mut buf)).await {
        Ok(Ok(0)) | Ok(Err(_)) => {}
        Ok(Ok(n)) => panic!("read {n} bytes from a dropped connection"),
        Err(_) => panic!("no EOF or error within 2 s of drop_connections"),
    }

    let mut again = TcpStream::connect(proxy.addr()).await.expect("reconnect");
    echo(&mut again, b"again").await;
    assert_eq!(proxy.connections(), 2);
}

#[tokio::test]
async fn latency_delays_each_direction() {
    let proxy = Proxy::start(echo_server().await).await;
    let mut stream = TcpStream::connect(proxy.addr()).await.expect("connect");
    echo(&mut stream, b"warm").await;

    proxy.set_latency(Duration::from_millis(100));
    let started = Instant::now();
    echo(&mut stream, b"slow").await;
    // One delay on the way in, one on the way back.
    assert!(
        started.elapsed() >= Duration::from_millis(200),
        "{:?}",
        started.elapsed()
    );

    proxy.set_latency(Duration::ZERO);
    let started = Instant::now();
    echo(&mut stream, b"fast").await;
    assert!(
        started.elapsed() < Duration::from_millis(100),
        "{:?}",
        started.elapsed()
    );
}
