//! The listener at an untrusted edge: slowloris, idle connections and the
//! connection cap, with real sockets.

use std::time::Duration;

use axum::http::StatusCode;
use coordinator::http::ServeConfig;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::common::*;

/// Whether the server closed `stream` within `within` (EOF or reset).
async fn closed_within(stream: &mut TcpStream, within: Duration) -> bool {
    let mut buf = [0u8; 1024];
    let deadline = tokio::time::Instant::now() + within;
    loop {
        match tokio::time::timeout_at(deadline, stream.read(&mut buf)).await {
            Err(_) => return false,
            Ok(Ok(0)) | Ok(Err(_)) => return true,
            Ok(Ok(_)) => continue, // e.g. a 408 before the close
        }
    }
}

fn host(base: &str) -> String {
    base.trim_start_matches("http://").to_owned()
}

async fn coordinator_with(p: &str, serve: ServeConfig) -> TestCoordinator {
    TestCoordinator::start(
        p,
        CoordinatorOptions {
            serve,
            ..CoordinatorOptions::default()
        },
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn slowloris_headers_are_cut_off_while_other_clients_are_served() {
    let p = prefix();
    let mut pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let c = coordinator_with(
        &p,
        ServeConfig {
            header_read_timeout: Duration::from_millis(500),
            ..ServeConfig::default()
        },
    )
    .await;
    let http = Http::new();
    let url = format!("{}/destinations/d1", c.base);
    assert_eq!(http.send("PUT", &url).await.0, StatusCode::CREATED);

    // a slowloris client: a request line, then one header byte every 100 ms
    let mut slow = TcpStream::connect(host(&c.base)).await.unwrap();
    slow.write_all(b"GET /destinations/d1 HTTP/1.1\r\nHost: x\r\n")
        .await
        .unwrap();
    let trickle = tokio::spawn(async move {
        for _ in 0..100 {
            if slow.write_all(b"X").await.is_err() {
                return (true, slow);
            }
            tokio::time::sleep(Duration::from_millis(100)).await;
            let mut probe = [0u8; 256];
            match tokio::time::timeout(Duration::from_millis(1), slow.read(&mut probe)).await {
                Ok(Ok(0)) | Ok(Err(_)) => return (true, slow),
                _ => {}
            }
        }
        (false, slow)
    });
    // meanwhile, another client is served normally
    for _ in 0..5 {
        assert_eq!(http.send("GET", &url).await.0, StatusCode::OK);
    }
    let (cut_off, _) = trickle.await.unwrap();
    assert!(cut_off, "the slowloris connection was never closed");
    pod.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn idle_connections_are_closed_but_busy_ones_are_not() {
    let p = prefix();
    let mut pod = TestPod::start(
        &p,
        "pod-a",
        PodOptions {
            work_ms: 1_500,
            ..PodOptions::default()
        },
    )
    .await;
    let c = coordinator_with(
        &p,
        ServeConfig {
            idle_timeout: Duration::from_millis(400),
            ..ServeConfig::default()
        },
    )
    .await;
    let http = Http::new();
    assert_eq!(
        http.send("PUT", &format!("{}/destinations/d1", c.base))
            .await
            .0,
        StatusCode::CREATED
    );
    let mut idle = Vec::new();
    for _ in 0..20 {
        idle.push(TcpStream::connect(host(&c.base)).await.unwrap());
    }
    // a call that takes longer than the idle timeout still completes
    let (status, body) = http
        .send("GET", &format!("{}/destinations/d1/work", c.base))
        .await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(body, "pod-a");
    for s in &mut idle {
        assert!(
            closed_within(s, Duration::from_secs(5)).await,
            "idle connection kept open"
        );
    }
    pod.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn at_the_connection_cap_idle_connections_make_room_for_new_clients() {
    let p = prefix();
    let mut pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let c = coordinator_with(
        &p,
        ServeConfig {
            max_connections: 32,
            // long: only the cap can close them
            idle_timeout: Duration::from_secs(600),
            header_read_timeout: Duration::from_secs(600),
            ..ServeConfig::default()
        },
    )
    .await;
    // 300 silent connections, far above the cap
    let mut silent = Vec::new();
    for _ in 0..300 {
        silent.push(TcpStream::connect(host(&c.base)).await.unwrap());
    }
    // a real client is still served, on fresh connections each time
    for i in 0..10 {
        let http = Http::new();
        let (status, _) = http
            .send("PUT", &format!("{}/destinations/cap-{i}", c.base))
            .await;
        assert_eq!(status, StatusCode::CREATED, "call {i}");
    }
    // and the server holds at most the cap: nearly all silent ones are closed
    let mut closed = 0;
    for s in &mut silent {
        if closed_within(s, Duration::from_millis(200)).await {
            closed += 1;
        }
    }
    assert!(
        closed >= 300 - 32,
        "only {closed} of 300 silent connections were closed"
    );
    pod.kill().await;
}
