//! The coordinator's HTTP handlers against real pods and a real
//! Valkey/Redis (`VALKEY_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "http/allocation.rs"]
mod allocation;
#[path = "http/client.rs"]
mod client;
mod common;
#[path = "http/edge.rs"]
mod edge;
#[path = "http/fencing.rs"]
mod fencing;
#[path = "http/https_member.rs"]
mod https_member;
#[path = "http/ownership.rs"]
mod ownership;
#[path = "http/register.rs"]
mod register;
#[path = "http/status.rs"]
mod status;

use std::collections::BTreeMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use axum::http::StatusCode;
use common::*;
use coordinator::http::ForwardConfig;
use coordinator::strategy::RoundRobin;
use coordinator::{CacheConfig, SaturationConfig};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn malformed_ids_are_rejected_before_touching_valkey() {
    let p = prefix();
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let http = Http::new();
    for path in [
        "/destinations/%2E%2E/x",
        "/destinations/./x",
        "/destinations/a%0Ab/x",
        "/destinations/a%2Fb",
        "/destinations/a%5Cb",
        "/locks/%00/x",
        "/locks/a%2Fb",
        "/locks/..",
        "/cancel/no:pe",
    ] {
        let method = if path.starts_with("/cancel") {
            "POST"
        } else {
            "GET"
        };
        let (status, _) = http.send(method, &format!("{}{path}", c.base)).await;
        assert_eq!(status, StatusCode::BAD_REQUEST, "{path}");
    }
    let (status, _) = http
        .send(
            "PUT",
            &format!("{}/destinations/{}", c.base, "x".repeat(300)),
        )
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
    assert_eq!(c.registry.metrics().valkey_round_trips, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn bind_on_2xx_only_then_proxy_then_deregister() {
    let p = prefix();
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            config: coordinator::http::CoordinatorConfig::builder()
                .claim_on_miss(false)
                .build(),
            ..CoordinatorOptions::default()
        },
    )
    .await;
    let http = Http::new();
    let url = |path: &str| format!("{}{path}", c.base);

    // no member at all: 503
    assert_eq!(
        http.send("PUT", &url("/destinations/t1")).await.0,
        StatusCode::SERVICE_UNAVAILABLE
    );

    let pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    // unbound destination: 404, without claiming
    assert_eq!(
        http.send("GET", &url("/destinations/t1/q")).await.0,
        StatusCode::NOT_FOUND
    );
    assert!(!c.registry.has_binding(&dest("t1")).await.unwrap());

    // the pod refuses to provision: nothing is bound
    let (status, _) = http.send("PUT", &url("/destinations/reject-1")).await;
    assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY);
    assert!(!c.registry.has_binding(&dest("reject-1")).await.unwrap());

    // the pod accepts: bound to it
    let (status, body) = http.send("PUT", &url("/destinations/t1")).await;
    assert_eq!(status, StatusCode::CREATED);
    assert_eq!(body, "pod-a");
    assert!(c.registry.has_binding(&dest("t1")).await.unwrap());

    let (status, body) = http.send("GET", &url("/destinations/t1/echo?x=1")).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "pod-a:echo"));

    let (status, _) = http.send("DELETE", &url("/destinations/t1")).await;
    assert_eq!(status, StatusCode::OK);
    assert!(!c.registry.has_binding(&dest("t1")).await.unwrap());
    assert_eq!(
        http.send("GET", &url("/destinations/t1/q")).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        http.send("DELETE", &url("/destinations/t1")).await.0,
        StatusCode::NOT_FOUND
    );
    assert!(pod.hits() >= 4);
    assert_eq!(pod.cancels(), 0, "completed calls send no cancel");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn failed_connect_evicts_and_re_resolves_once() {
    let p = prefix();
    let mut a = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let b = TestPod::start(&p, "pod-b", PodOptions::default()).await;
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let d = dest("flaky");
    c.registry.add_pod_to_destination(&d, a.id()).await.unwrap();
    c.registry.add_pod_to_destination(&d, b.id()).await.unwrap();
    // pod-a's HTTP server is gone but its record is still live
    a.stop_server().await;

    let http = Http::new();
    for _ in 0..4 {
        let (status, body) = http
            .send("GET", &format!("{}/destinations/flaky/x", c.base))
            .await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "pod-b:x"));
    }
    assert!(b.hits() >= 4);
    assert_eq!(a.cancels() + b.cancels(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn saturation_fans_out_and_warm_cache_spreads_calls_across_both_pods() {
    let p = prefix();
    let opts = || PodOptions {
        saturation: SaturationConfig {
            max_concurrent: 1,
            queue_threshold: Duration::from_millis(150),
        },
        work_ms: 100,
        ..Default::default()
    };
    let a = TestPod::start(&p, "pod-a", opts()).await;
    let b = TestPod::start(&p, "pod-b", opts()).await;
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            cache: Some(CacheConfig {
                ttl: Duration::from_secs(30),
                capacity: 100,
            }),
            ..Default::default()
        },
    )
    .await;
    let d = dest("hot");
    let quiet = |a: &TestPod, b: &TestPod| a.cancels() + b.cancels() == 0;
    a.member.add_to_destination(&d).await.unwrap();
    let http = Http::new();
    let url = format!("{}/destinations/hot/work", c.base);

    // burst: pod-a runs one call at a time, the queue stays non-empty
    let burst: Vec<_> = (0..6)
        .map(|_| {
            let http = http.clone();
            let url = url.clone();
            tokio::spawn(async move { http.send("GET", &url).await })
        })
        .collect();
    for call in burst {
        let (status, body) = call.await.unwrap();
        assert_eq!(
            (status, body.as_str()),
            (StatusCode::OK, "pod-a"),
            "cached set is still {{pod-a}}"
        );
    }
    let v = valkey().await;
    let key = c.registry.keys().destination(&d);
    assert_eq!(
        smembers(&v, &key).await,
        ["pod-a".to_owned(), "pod-b".to_owned()].into(),
        "the saturated pod added its least-loaded peer"
    );

    // the coordinator notices the new set on its next lookup...
    c.registry.evict(&d);
    http.send("GET", &url).await;
    // ...and, while the cache is warm, spreads calls with no Valkey round trip
    let trips = c.registry.metrics().valkey_round_trips;
    let mut by_pod = BTreeMap::new();
    for _ in 0..8 {
        let (status, body) = http.send("GET", &url).await;
        assert_eq!(status, StatusCode::OK);
        *by_pod.entry(body).or_insert(0) += 1;
    }
    assert_eq!(c.registry.metrics().valkey_round_trips, trips);
    assert_eq!(by_pod.get("pod-a"), Some(&4), "{by_pod:?}");
    assert_eq!(by_pod.get("pod-b"), Some(&4), "{by_pod:?}");

    assert!(quiet(&a, &b), "completed calls send no cancel");
    // fan-out adds each peer at most once: a second burst has nobody to add
    assert_eq!(a.member.fan_out(&d).await.unwrap(), None);
    drop(b);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn locks_route_to_their_owner_and_expire_after_its_death() {
    let p = prefix();
    let opts = || PodOptions {
        ttl: Duration::from_secs(1),
        heartbeat: Duration::from_millis(200),
        lock_ttl: Duration::from_secs(1),
        ..Default::default()
    };
    let a = TestPod::start(&p, "pod-a", opts()).await;
    let mut b = TestPod::start(&p, "pod-b", opts()).await;
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let d = dest("tx");
    a.member.add_to_destination(&d).await.unwrap();
    b.member.add_to_destination(&d).await.unwrap();
    let http = Http::new();

    // begin on pod-b directly, then every locked call goes to pod-b
    let (status, lock) = http
        .send("POST", &format!("http://{}/destinations/tx/begin", b.addr))
        .await;
    assert_eq!(status, StatusCode::OK);
    for i in 0..6 {
        let (status, body) = http
            .send("POST", &format!("{}/locks/{lock}/q{i}", c.base))
            .await;
        assert_eq!((status, body.as_str()), (StatusCode::OK, "pod-b"));
    }
    assert_eq!(a.hits(), 0);

    // the record survives heartbeats beyond its TTL while the lock is held
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(
        http.send("GET", &format!("{}/locks/{lock}", c.base))
            .await
            .0,
        StatusCode::OK
    );

    // pod-b dies: the session fails (503), then the lock record expires (404)
    b.kill().await;
    let (status, _) = http.send("GET", &format!("{}/locks/{lock}", c.base)).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE);
    let v = valkey().await;
    let lock_key = format!("{p}:lock:{lock}");
    assert!(gone_within(&v, &lock_key, Duration::from_secs(4)).await);
    assert_eq!(
        http.send("GET", &format!("{}/locks/{lock}", c.base))
            .await
            .0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        http.send(
            "GET",
            &format!("{}/locks/{}", c.base, coordinator::LockId::generate())
        )
        .await
        .0,
        StatusCode::NOT_FOUND
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn client_disconnect_sends_a_cancel_that_aborts_the_pod_operation() {
    let p = prefix();
    let pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    pod.member.add_to_destination(&dest("c")).await.unwrap();
    let http = Http::new();

    let url = format!("{}/destinations/c/detached", c.base);
    let call = tokio::spawn(async move { http.send("GET", &url).await });
    assert!(
        eventually(Duration::from_secs(3), || async {
            pod.stats.slow_started.load(Ordering::SeqCst) == 1
        })
        .await
    );
    call.abort(); // the client goes away
    assert!(
        eventually(Duration::from_secs(3), || async {
            pod.stats.aborted_by_cancel.load(Ordering::SeqCst) == 1
        })
        .await,
        "the pod operation was aborted by the cancel message (dropped otherwise: {})",
        pod.stats.dropped_otherwise.load(Ordering::SeqCst)
    );
    assert!(pod.member.cancellations().is_empty());
    assert_eq!(pod.cancels(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn upstream_timeout_answers_504_and_cancels_the_pod_operation() {
    let p = prefix();
    let pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            forward: ForwardConfig {
                response_timeout: Duration::from_millis(300),
                ..Default::default()
            },
            strategy: Arc::new(RoundRobin::new()),
            ..Default::default()
        },
    )
    .await;
    pod.member.add_to_destination(&dest("c")).await.unwrap();

    let (status, _) = Http::new()
        .send("GET", &format!("{}/destinations/c/detached", c.base))
        .await;
    assert_eq!(status, StatusCode::GATEWAY_TIMEOUT);
    assert!(
        eventually(Duration::from_secs(3), || async {
            pod.stats.aborted_by_cancel.load(Ordering::SeqCst) == 1
        })
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn pod_middleware_aborts_a_handler_on_a_cancel_message() {
    let p = prefix();
    let pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let id = coordinator::RequestId::generate();
    let url = format!("http://{}/destinations/c/slow", pod.addr);
    let call = {
        let id = id.clone();
        tokio::spawn(async move {
            Http::new()
                .send_with_header(
                    "GET",
                    &url,
                    coordinator::http::REQUEST_ID_HEADER,
                    id.as_str(),
                )
                .await
        })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            pod.stats.slow_started.load(Ordering::SeqCst) == 1
        })
        .await
    );
    let cancel = format!("http://{}/_coordinator/cancel/{id}", pod.addr);
    assert_eq!(
        Http::new().send("POST", &cancel).await.0,
        StatusCode::NO_CONTENT
    );
    let (status, _) = call.await.unwrap();
    assert_eq!(status.as_u16(), coordinator::http::pod::CANCELLED_STATUS);
    assert_eq!(pod.stats.aborted_by_cancel.load(Ordering::SeqCst), 1);
    assert_eq!(
        Http::new().send("POST", &cancel).await.0,
        StatusCode::NOT_FOUND
    );
    assert_eq!(
        Http::new()
            .send(
                "POST",
                &format!("http://{}/_coordinator/cancel/a:b", pod.addr)
            )
            .await
            .0,
        StatusCode::BAD_REQUEST
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn in_process_caller_cancels_by_request_id() {
    let p = prefix();
    let pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let c = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let d = dest("c");
    pod.member.add_to_destination(&d).await.unwrap();

    let id = coordinator::RequestId::generate();
    assert!(!c.coordinator.cancel(&id).await, "nothing in flight yet");
    let call = {
        let coordinator = c.coordinator.clone();
        let (d, id) = (d.clone(), id.clone());
        tokio::spawn(async move {
            let req = axum::http::Request::builder()
                .uri("/destinations/c/detached")
                .body(axum::body::Body::empty())
                .unwrap();
            coordinator.lookup_and_proxy_with_id(&d, req, id).await
        })
    };
    assert!(
        eventually(Duration::from_secs(3), || async {
            pod.stats.slow_started.load(Ordering::SeqCst) == 1
        })
        .await
    );
    assert!(c.coordinator.cancel(&id).await, "the pod knew the call");
    let resp = call.await.unwrap();
    assert_eq!(
        resp.status(),
        StatusCode::OK,
        "the pod answered once its work was cancelled"
    );
    assert_eq!(pod.stats.aborted_by_cancel.load(Ordering::SeqCst), 1);
    assert_eq!(pod.cancels(), 1);
}
