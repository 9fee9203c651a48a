//! The coordinator's metrics move: calls by outcome, route lookups (hit,
//! miss, coalesced), forwarding latency and Valkey errors, recorded into a
//! debugging recorder while real pods and a real Valkey/Redis
//! (`VALKEY_URL`) serve the calls.

#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::sync::OnceLock;

use axum::http::StatusCode;
use common::*;
use fred::prelude::*;
use metrics_snapshot::{DebuggingRecorder, Snapshot, Snapshotter};

/// The process-wide debugging recorder of this test binary (installed
/// once; the tests that read it take `LOCK` so their counts don't mix).
fn snapshotter() -> &'static Snapshotter {
    static SNAPSHOTTER: OnceLock<Snapshotter> = OnceLock::new();
    SNAPSHOTTER.get_or_init(|| {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("no other recorder in this binary");
        snapshotter
    })
}

static LOCK: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The counters and histograms since the last call (a snapshot drains the
/// debugging recorder).
fn take_delta() -> Snapshot {
    Snapshot::take(snapshotter())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn calls_lookups_forwards_and_valkey_errors_are_counted() {
    let _serial = LOCK.lock().await;
    snapshotter();
    let p = prefix();
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let _pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let http = Http::new();
    let url = |path: &str| format!("{}{path}", c.base);
    take_delta();

    // Bind, then two calls: the bind evicted the cache, so the first call
    // misses (reads Valkey) and the second hits.
    assert_eq!(
        http.send("PUT", &url("/destinations/m1")).await.0,
        StatusCode::CREATED
    );
    assert_eq!(
        http.send("GET", &url("/destinations/m1/q")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        http.send("GET", &url("/destinations/m1/q")).await.0,
        StatusCode::OK
    );
    // A malformed id: a client error, before any lookup.
    assert_eq!(
        http.send("GET", &url("/destinations/a%0Ab/x")).await.0,
        StatusCode::BAD_REQUEST
    );
    // No route at all.
    assert_eq!(
        http.send("GET", &url("/nowhere")).await.0,
        StatusCode::NOT_FOUND
    );
    let delta = take_delta();
    assert_eq!(
        delta.counter(
            "coordinator_requests_total",
            &[("route", "bind"), ("outcome", "ok")]
        ),
        1
    );
    assert_eq!(
        delta.counter(
            "coordinator_requests_total",
            &[("route", "none"), ("outcome", "client_error")]
        ),
        1
    );
    assert_eq!(
        delta.counter(
            "coordinator_requests_total",
            &[("route", "proxy"), ("outcome", "ok")]
        ),
        2
    );
    assert_eq!(
        delta.counter(
            "coordinator_requests_total",
            &[("route", "proxy"), ("outcome", "client_error")]
        ),
        1
    );
    assert!(delta.counter("coordinator_route_lookups_total", &[("result", "miss")]) >= 1);
    assert!(delta.counter("coordinator_route_lookups_total", &[("result", "hit")]) >= 1);
    assert!(
        delta
            .samples("coordinator_forward_seconds", &[("outcome", "ok")])
            .len()
            >= 3
    );
    assert!(delta.counter("coordinator_valkey_round_trips_total", &[]) >= 2);

    // A Valkey error: the destination's key holds a string, so the
    // resolution script fails with WRONGTYPE and the call answers 503.
    let valkey = valkey().await;
    let key = c.registry.keys().destination(&dest("broken"));
    let _: () = valkey
        .set(&key, "not a set", None, None, false)
        .await
        .unwrap();
    assert_eq!(
        http.send("GET", &url("/destinations/broken/q")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );
    let delta = take_delta();
    assert_eq!(
        delta.counter(
            "coordinator_valkey_errors_total",
            &[("component", "coordinator"), ("kind", "valkey")]
        ),
        1
    );
    assert_eq!(
        delta.counter(
            "coordinator_requests_total",
            &[("route", "proxy"), ("outcome", "server_error")]
        ),
        1
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn concurrent_misses_count_as_one_miss_and_coalesced_lookups() {
    let _serial = LOCK.lock().await;
    snapshotter();
    let (_pod, reg) = pod_and_a_cold_destination(&prefix()).await;
    take_delta();

    // Hold every Valkey reply for a while (CLIENT PAUSE ALL), so the first
    // lookup is still in flight when the other calls arrive: without it the
    // lookup can finish before a loaded two-core machine runs the others,
    // and they all hit the cache instead of sharing the lookup.
    let plain = valkey().await;
    let _: String = server_command(&plain, "CLIENT", vec!["PAUSE", "500", "ALL"]).await;

    let n = 40;
    for answer in resolve_at_once(&reg, &dest("hot"), n).await {
        assert!(answer.unwrap().route().is_some());
    }
    let delta = take_delta();
    let lookups = |result| delta.counter("coordinator_route_lookups_total", &[("result", result)]);
    let (miss, coalesced, hit) = (lookups("miss"), lookups("coalesced"), lookups("hit"));
    assert_eq!(miss + coalesced + hit, n as u64);
    // One call led the Valkey lookup; the others shared it.
    assert!(miss >= 1);
    assert!(
        coalesced >= 1,
        "40 simultaneous misses shared no lookup: miss {miss}, hit {hit}"
    );
}
