//! Idle connections are judged by requests, not by bytes: a client that only
//! keeps bytes moving without a request (HTTP/2 pings, a trickle of frames)
//! is closed after the idle timeout, while a slow response body is not cut
//! off. Real sockets, a real server.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, time::Duration};

use axum::{Router, body::Body, routing::get};
use http_edge::{ServeConfig, serve};
use tokio::{
    io::{AsyncReadExt, AsyncWriteExt},
    net::{TcpListener, TcpStream},
};

const IDLE: Duration = Duration::from_millis(300);

/// Serves a router with a slow streaming route; returns its address.
async fn server() -> SocketAddr {
    let app = Router::new().route("/", get(|| async { "ok" })).route(
        "/stream",
        get(|| async {
            // Ten chunks, 100 ms apart: a body that takes three idle
            // timeouts to send.
            let chunks = futures::stream::unfold(0u32, |n| async move {
                if n == 10 {
                    return None;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
                Some((Ok::<_, std::io::Error>(format!("chunk{n};")), n + 1))
            });
            Body::from_stream(chunks)
        }),
    );
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = ServeConfig {
        idle_timeout: IDLE,
        ..ServeConfig::default()
    };
    tokio::spawn(serve(listener, app, config, std::future::pending()));
    addr
}

/// An HTTP/2 frame header: length, type, flags, stream 0.
fn frame(kind: u8, payload: &[u8]) -> Vec<u8> {
    let len = u32::try_from(payload.len()).unwrap().to_be_bytes();
    let mut bytes = vec![len[1], len[2], len[3], kind, 0, 0, 0, 0, 0];
    bytes.extend_from_slice(payload);
    bytes
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_http2_client_that_only_pings_is_closed_as_idle() {
    let addr = server().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n")
        .await
        .unwrap();
    socket.write_all(&frame(0x4, &[])).await.unwrap(); // SETTINGS
    let (mut read, mut write) = socket.into_split();
    // Keep bytes moving both ways (the server acknowledges every ping),
    // never sending a request.
    let pinger = tokio::spawn(async move {
        for n in 0u64.. {
            if write
                .write_all(&frame(0x6, &n.to_be_bytes()))
                .await
                .is_err()
            {
                return n;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        unreachable!()
    });
    let mut sink = vec![0; 4096];
    let closed = tokio::time::timeout(Duration::from_secs(10), async {
        loop {
            match read.read(&mut sink).await {
                Ok(0) | Err(_) => return,
                Ok(_) => {}
            }
        }
    })
    .await;
    pinger.abort();
    assert!(
        closed.is_ok(),
        "a pinging HTTP/2 client without a request was kept open for 10 s (idle timeout {IDLE:?})"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_response_body_is_not_cut_off_as_idle() {
    let addr = server().await;
    let mut socket = TcpStream::connect(addr).await.unwrap();
    socket
        .write_all(b"GET /stream HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer))
        .await
        .expect("the answer ended")
        .unwrap();
    let text = String::from_utf8_lossy(&answer);
    assert!(text.starts_with("HTTP/1.1 200"), "{text}");
    for n in 0..10 {
        assert!(
            text.contains(&format!("chunk{n};")),
            "chunk {n} missing: {text}"
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_connection_is_closed_and_others_are_served() {
    let addr = server().await;
    let mut silent = TcpStream::connect(addr).await.unwrap();
    let mut client = TcpStream::connect(addr).await.unwrap();
    client
        .write_all(b"GET / HTTP/1.1\r\nhost: test\r\nconnection: close\r\n\r\n")
        .await
        .unwrap();
    let mut answer = Vec::new();
    client.read_to_end(&mut answer).await.unwrap();
    assert!(String::from_utf8_lossy(&answer).ends_with("ok"));
    let mut byte = [0; 1];
    let closed = tokio::time::timeout(Duration::from_secs(10), silent.read(&mut byte)).await;
    assert!(matches!(closed, Ok(Ok(0)) | Ok(Err(_))), "{closed:?}");
}
