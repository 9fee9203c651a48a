//! One test per row of `docs/coordinator-http.md`: the coordinator's own
//! answers, their status and their JSON `code`.

use std::time::Duration;

use axum::http::StatusCode;
use coordinator::http::CoordinatorConfig;
use coordinator::{CacheConfig, ValkeyClient};
use fred::prelude::*;

use crate::common::*;

/// `(status, code)` of a coordinator answer; `code` is empty for a body
/// that is not a JSON error.
async fn call(http: &Http, method: &str, url: &str) -> (StatusCode, String) {
    let (status, body) = http.send(method, url).await;
    let code = serde_json::from_str::<serde_json::Value>(&body)
        .ok()
        .and_then(|v| {
            assert!(v["error"].is_string(), "error message missing: {body}");
            v["code"].as_str().map(str::to_owned)
        })
        .unwrap_or_default();
    (status, code)
}

/// A member record whose address refuses connections (a closed port).
async fn unreachable_member(v: &ValkeyClient, p: &str, id: &str) {
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = format!("http://{}", closed.local_addr().unwrap());
    drop(closed);
    let _: () = v
        .hset(
            format!("{p}:member:{id}"),
            [("address", addr.as_str()), ("load", "0")],
        )
        .await
        .unwrap();
    let _: () = v.sadd(format!("{p}:members"), id).await.unwrap();
}

fn no_cache() -> CoordinatorOptions {
    CoordinatorOptions {
        cache: None,
        ..CoordinatorOptions::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn every_coordinator_answer_has_its_status_and_json_code() {
    let p = prefix();
    let v = valkey().await;
    let c = TestCoordinator::start(&p, no_cache()).await;
    let http = Http::new();
    let url = |path: &str| format!("{}{path}", c.base);

    // no member at all
    let row = call(&http, "GET", &url("/destinations/d0/x")).await;
    assert_eq!(
        row,
        (StatusCode::SERVICE_UNAVAILABLE, "no_live_member".into())
    );
    let row = call(&http, "PUT", &url("/destinations/d0")).await;
    assert_eq!(
        row,
        (StatusCode::SERVICE_UNAVAILABLE, "no_live_member".into())
    );

    // malformed ids, dot segments, unknown routes
    for (path, method) in [
        ("/destinations/%2E%2E/x", "GET"),
        ("/destinations/a%2Fb", "PUT"),
        ("/locks/a%00b", "GET"),
        ("/cancel/a:b", "POST"),
        // not UTF-8 once percent-decoded: the same JSON answer, counted
        ("/destinations/%FF", "PUT"),
        ("/locks/%C3/x", "GET"),
    ] {
        let row = call(&http, method, &url(path)).await;
        assert_eq!(
            row,
            (StatusCode::BAD_REQUEST, "invalid_id".into()),
            "{path}"
        );
    }
    for path in [
        "/destinations/d0/../admin",
        "/destinations/d0/%2e%2E/admin",
        "/destinations/d0/./x",
        "/locks/l1/../x",
    ] {
        let row = call(&http, "GET", &url(path)).await;
        assert_eq!(
            row,
            (StatusCode::BAD_REQUEST, "invalid_path".into()),
            "{path}"
        );
    }
    let row = call(&http, "GET", &url("/admin")).await;
    assert_eq!(row, (StatusCode::NOT_FOUND, "no_route".into()));

    // unknown request id to cancel
    let row = call(&http, "POST", &url("/cancel/abc")).await;
    assert_eq!(row, (StatusCode::NOT_FOUND, "unknown_request".into()));

    // DELETE of an unbound destination
    let row = call(&http, "DELETE", &url("/destinations/never")).await;
    assert_eq!(row, (StatusCode::NOT_FOUND, "unknown_destination".into()));

    // DELETE when every owner is dead: the set is dropped, 204 (as Node)
    let _: () = v
        .sadd(format!("{p}:destination:orphan"), "ghost")
        .await
        .unwrap();
    let (status, _) = call(&http, "DELETE", &url("/destinations/orphan")).await;
    assert_eq!(status, StatusCode::NO_CONTENT);
    assert!(!exists(&v, &format!("{p}:destination:orphan")).await);

    // a destination bound to a member whose address refuses connections: 502
    unreachable_member(&v, &p, "node:pod:9").await;
    let _: () = v
        .sadd(format!("{p}:destination:down"), "node:pod:9")
        .await
        .unwrap();
    let row = call(&http, "GET", &url("/destinations/down/x")).await;
    assert_eq!(
        row,
        (StatusCode::BAD_GATEWAY, "upstream_unavailable".into())
    );

    // locks: unknown, owner unreachable, owner gone
    let row = call(&http, "GET", &url("/locks/l-unknown")).await;
    assert_eq!(row, (StatusCode::NOT_FOUND, "unknown_lock".into()));
    let _: () = v
        .hset(
            format!("{p}:lock:l-down"),
            [("podId", "node:pod:9"), ("destinationId", "down")],
        )
        .await
        .unwrap();
    let row = call(&http, "GET", &url("/locks/l-down/q")).await;
    assert_eq!(
        row,
        (
            StatusCode::SERVICE_UNAVAILABLE,
            "lock_owner_unreachable".into()
        )
    );
    let _: () = v
        .hset(
            format!("{p}:lock:l-gone"),
            [("podId", "user@x"), ("destinationId", "down")],
        )
        .await
        .unwrap();
    let row = call(&http, "GET", &url("/locks/l-gone/q")).await;
    assert_eq!(row, (StatusCode::NOT_FOUND, "lock_owner_gone".into()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn unbound_destination_is_404_when_first_touch_is_off() {
    let p = prefix();
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            config: CoordinatorConfig::builder().claim_on_miss(false).build(),
            ..CoordinatorOptions::default()
        },
    )
    .await;
    let mut pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let http = Http::new();
    let row = call(&http, "GET", &format!("{}/destinations/new/x", c.base)).await;
    assert_eq!(row, (StatusCode::NOT_FOUND, "unknown_destination".into()));
    assert!(!c.registry.has_binding(&dest("new")).await.unwrap());
    pod.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn valkey_down_is_503_store_unavailable() {
    // a client whose server went away: commands fail after their timeout
    let server = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let port = server.local_addr().unwrap().port();
    drop(server);
    let config =
        fred::types::config::Config::from_url(&format!("redis://127.0.0.1:{port}")).unwrap();
    let client = fred::types::Builder::from_config(config)
        .with_performance_config(|p| p.default_command_timeout = Duration::from_millis(300))
        .build()
        .unwrap();
    let registry = coordinator::Registry::new(
        client,
        coordinator::RegistryConfig {
            cache: Some(CacheConfig::default()),
            ..coordinator::RegistryConfig::default()
        },
        std::sync::Arc::new(coordinator::strategy::RoundRobin::new()),
    )
    .unwrap();
    let c = coordinator::http::Coordinator::new(
        registry,
        coordinator::http::Forwarder::new(Default::default()).unwrap(),
        CoordinatorConfig::default(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}", listener.local_addr().unwrap());
    let server = tokio::spawn(coordinator::http::serve(
        listener,
        c.router(),
        Default::default(),
        std::future::pending(),
    ));
    let http = Http::new();
    for (method, path) in [
        ("GET", "/destinations/d/x"),
        ("PUT", "/destinations/d"),
        ("GET", "/locks/l"),
    ] {
        let row = call(&http, method, &format!("{base}{path}")).await;
        assert_eq!(
            row,
            (StatusCode::SERVICE_UNAVAILABLE, "store_unavailable".into()),
            "{path}"
        );
    }
    server.abort();
}

/// `413 payload_too_large`: a body over `max_request_body` is refused before
/// anything reaches the pod, when its length is declared and when it is
/// streamed (chunked, no length); a body at the limit goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn bodies_over_the_limit_are_413_payload_too_large() {
    let p = prefix();
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            config: CoordinatorConfig::builder().max_request_body(1024).build(),
            ..CoordinatorOptions::default()
        },
    )
    .await;
    let mut pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let http = Http::new();
    let url = format!("{}/destinations/big/upload", c.base);

    let (status, _) = http.send_body("POST", &url, vec![b'x'; 1024]).await;
    assert_eq!(status, StatusCode::OK);

    let (status, body) = http.send_body("POST", &url, vec![b'x'; 1025]).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    let json: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(json["code"], "payload_too_large", "{body}");

    // Streamed without a length: cut off at the limit.
    let (status, body) = streamed_post(&url, 4, 1024).await;
    assert_eq!(status, StatusCode::PAYLOAD_TOO_LARGE, "{body}");
    pod.kill().await;
}

/// POSTs `chunks` chunks of `size` bytes with `transfer-encoding: chunked`
/// over a raw socket; returns the status and the body of the answer.
async fn streamed_post(url: &str, chunks: usize, size: usize) -> (StatusCode, String) {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let uri: axum::http::Uri = url.parse().unwrap();
    let authority = uri.authority().unwrap().as_str().to_owned();
    let mut socket = tokio::net::TcpStream::connect(&authority).await.unwrap();
    let head = format!(
        "POST {} HTTP/1.1\r\nhost: {authority}\r\ntransfer-encoding: chunked\r\nconnection: close\r\n\r\n",
        uri.path()
    );
    socket.write_all(head.as_bytes()).await.unwrap();
    for _ in 0..chunks {
        let chunk = format!("{size:x}\r\n{}\r\n", "y".repeat(size));
        // The server may answer and close before every chunk is sent.
        if socket.write_all(chunk.as_bytes()).await.is_err() {
            break;
        }
    }
    let _ = socket.write_all(b"0\r\n\r\n").await;
    let mut answer = Vec::new();
    let _ = tokio::time::timeout(Duration::from_secs(10), socket.read_to_end(&mut answer)).await;
    let text = String::from_utf8_lossy(&answer).into_owned();
    let code = text
        .split_whitespace()
        .nth(1)
        .and_then(|code| code.parse::<u16>().ok())
        .unwrap_or_else(|| panic!("no HTTP answer: {text:?}"));
    let body = text.split("\r\n\r\n").nth(1).unwrap_or_default().to_owned();
    (StatusCode::from_u16(code).unwrap(), body)
}
