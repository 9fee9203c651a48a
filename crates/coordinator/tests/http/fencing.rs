//! Ownership fencing against a real Valkey/Redis: a pod refuses routed
//! calls once it cannot know it still owns the destination, and the
//! coordinator re-resolves and reaches the new owner.

use std::time::{Duration, Instant};

use axum::http::StatusCode;
use coordinator::http::{EPOCH_HEADER, ROUTED_DESTINATION_HEADER};
use coordinator::strategy::RoundRobin;
use coordinator::{CacheConfig, DestinationId, LEASE_FRACTION, ValkeyClient};

use crate::common::*;

fn fenced() -> PodOptions {
    PodOptions {
        fenced: true,
        ..PodOptions::default()
    }
}

/// A coordinator whose cache stays warm for the whole test.
fn warm() -> CoordinatorOptions {
    CoordinatorOptions {
        cache: Some(CacheConfig {
            ttl: Duration::from_secs(60),
            capacity: 100,
        }),
        strategy: std::sync::Arc::new(RoundRobin::new()),
        ..CoordinatorOptions::default()
    }
}

/// Two of each: pods a and b (fenced), coordinators c1 and c2 (warm
/// caches); and destination `name`, an HTTP client and the destination's
/// URL through c1 and c2. Nothing bound yet.
async fn two_of_each(name: &str) -> TwoOfEach {
    let p = prefix();
    let a = TestPod::start(&p, "a", fenced()).await;
    let b = TestPod::start(&p, "b", fenced()).await;
    let c1 = TestCoordinator::start(&p, warm()).await;
    let c2 = TestCoordinator::start(&p, warm()).await;
    let urls = [&c1, &c2].map(|c| format!("{}/destinations/{name}", c.base));
    (a, b, c1, c2, dest(name), Http::new(), urls)
}

type TwoOfEach = (
    TestPod,
    TestPod,
    TestCoordinator,
    TestCoordinator,
    DestinationId,
    Http,
    [String; 2],
);

/// `d` bound to pod a through c1, whose cache then routes `url1` to a; a is
/// cut from Valkey long enough for its record to expire, and another
/// coordinator (`url2`) fails the destination over to b. The epoch of the
/// binding to a.
async fn failed_over_behind_c1(
    valkey: &ValkeyClient,
    a: &mut TestPod,
    c1: &TestCoordinator,
    d: &DestinationId,
    http: &Http,
    [url1, url2]: [&str; 2],
) -> u64 {
    let bound = c1.registry.add_pod_to_destination(d, a.id()).await.unwrap();
    assert_eq!(http.send("GET", url1).await, (StatusCode::OK, "a".into()));
    cut_from_valkey(a, valkey).await;
    assert_eq!(http.send("GET", url2).await, (StatusCode::OK, "b".into()));
    bound
}

/// `pod` loses Valkey but stays reachable: waits until its record expired.
async fn cut_from_valkey(pod: &mut TestPod, valkey: &ValkeyClient) {
    pod.stop_heartbeat().await;
    assert!(member_record_expires(valkey, pod, Duration::from_secs(5)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_pod_that_cannot_heartbeat_stops_accepting_at_four_fifths_of_its_ttl() {
    let p = prefix();
    let valkey = valkey().await;
    let mut a = TestPod::start(&p, "a", fenced()).await;
    let c = TestCoordinator::start(&p, warm()).await;
    let d = dest("fenced-1");
    c.registry.add_pod_to_destination(&d, a.id()).await.unwrap();
    let http = Http::new();
    let url = format!("{}/destinations/fenced-1", c.base);
    assert_eq!(http.send("GET", &url).await, (StatusCode::OK, "a".into()));

    // the pod stays reachable but its heartbeats stop (as when its Valkey
    // connection is cut): no heartbeat succeeds after this point
    a.stop_heartbeat().await;
    let stopped = Instant::now();
    let ttl = PodOptions::default().ttl;
    let lease = ttl.mul_f64(LEASE_FRACTION);
    let deadline = a.member.lease_deadline().expect("registered");
    assert!(
        deadline <= stopped + lease,
        "the lease counts from a heartbeat's start"
    );

    let member_key = a.member.keys().member(a.id());
    let refused_at = loop {
        let (status, body) = http.send("GET", &url).await;
        if status == StatusCode::MISDIRECTED_REQUEST {
            assert!(body.contains("stale_owner"), "{body}");
            break Instant::now();
        }
        assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
        assert!(
            stopped.elapsed() < ttl,
            "the pod still served calls {:?} after its last heartbeat",
            stopped.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    };
    assert!(
        refused_at >= deadline,
        "refused before its lease ended ({:?} early)",
        deadline - refused_at
    );
    assert!(
        refused_at <= deadline + Duration::from_millis(250),
        "refused {:?} after its lease ended",
        refused_at - deadline
    );
    assert!(
        exists(&valkey, &member_key).await,
        "the pod stopped accepting before its record expired (before any reassignment)"
    );
    let hits = a.hits();
    for _ in 0..3 {
        let (status, _) = http.send("GET", &url).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    }
    assert_eq!(a.hits(), hits, "refused calls never reach the handler");
    let refusals = c.registry.metrics().stale_owner_refusals;
    assert!(refusals >= 4, "each refusal re-resolved once: {refusals}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_warm_cache_pointing_at_the_old_pod_after_failover_is_refused_and_rerouted() {
    let valkey = valkey().await;
    let (mut a, b, c1, c2, d, http, [url1, url2]) = two_of_each("moved").await;
    // a loses Valkey but stays reachable; its record expires; another
    // coordinator fails the destination over to b
    let urls = [url1.as_str(), url2.as_str()];
    let before = failed_over_behind_c1(&valkey, &mut a, &c1, &d, &http, urls).await;
    let route = c2.registry.route(&d, Default::default()).await.unwrap();
    let after = route.route().unwrap().epoch;
    assert!(
        after > before,
        "failover bumped the epoch: {before} -> {after}"
    );

    // c1's cache still says a: a refuses, c1 re-resolves and reaches b
    let (a_hits, b_hits) = (a.hits(), b.hits());
    assert_eq!(http.send("GET", &url1).await, (StatusCode::OK, "b".into()));
    assert_eq!(a.hits(), a_hits, "the old owner did not serve the call");
    assert_eq!(b.hits(), b_hits + 1, "the new owner served it, once");
    assert_eq!(c1.registry.metrics().stale_owner_refusals, 1);
    // and c1's cache now points at b
    assert_eq!(http.send("GET", &url1).await, (StatusCode::OK, "b".into()));
    assert_eq!(a.hits(), a_hits);
    assert_eq!(c1.registry.metrics().stale_owner_refusals, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn an_older_epoch_is_refused_after_a_newer_one_was_seen() {
    let (a, b, c1, _c2, d, http, [url1, url2]) = two_of_each("grown").await;
    a.member.add_to_destination(&d).await.unwrap();
    // c1 caches {a} at the first epoch
    assert_eq!(http.send("GET", &url1).await, (StatusCode::OK, "a".into()));
    // the set grows (a fan-out): a newer epoch; c2 reads it and a sees it
    let newer = b.member.add_to_destination(&d).await.unwrap();
    let mut a_saw_newer = false;
    for _ in 0..4 {
        let (status, body) = http.send("GET", &url2).await;
        assert_eq!(status, StatusCode::OK);
        a_saw_newer |= body == "a";
    }
    assert!(a_saw_newer, "round robin sent c2's calls to both pods");

    // c1 still routes by the older epoch: a refuses, c1 re-resolves once
    let (status, _) = http.send("GET", &url1).await;
    assert_eq!(status, StatusCode::OK);
    assert_eq!(c1.registry.metrics().stale_owner_refusals, 1);

    // directly: an epoch older than the newest seen is refused
    let pod = format!("http://{}/destinations/grown", a.addr);
    let older = (newer - 1).to_string();
    let (status, body) = http
        .send_with_headers(
            "GET",
            &pod,
            &[(EPOCH_HEADER, &older), (ROUTED_DESTINATION_HEADER, "grown")],
        )
        .await;
    assert_eq!(status, StatusCode::MISDIRECTED_REQUEST);
    assert!(body.contains("stale_epoch"), "{body}");
    let newest = newer.to_string();
    let (status, _) = http
        .send_with_headers(
            "GET",
            &pod,
            &[
                (EPOCH_HEADER, &newest),
                (ROUTED_DESTINATION_HEADER, "grown"),
            ],
        )
        .await;
    assert_eq!(status, StatusCode::OK);
    // a call not routed by a coordinator (no fence headers) is not checked;
    // half a fence is malformed
    assert_eq!(http.send("GET", &pod).await.0, StatusCode::OK);
    let (status, _) = http
        .send_with_headers("GET", &pod, &[(EPOCH_HEADER, &older)])
        .await;
    assert_eq!(status, StatusCode::BAD_REQUEST);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn client_sent_fence_headers_never_reach_the_pod() {
    let p = prefix();
    let a = TestPod::start(&p, "a", fenced()).await;
    let c = TestCoordinator::start(&p, warm()).await;
    let http = Http::new();
    // a forged far-future epoch on a call the coordinator does not fence
    // (POST /destinations) would make the pod refuse every later routed call
    let forged = [
        (EPOCH_HEADER, "18446744073709551615"),
        (ROUTED_DESTINATION_HEADER, "victim"),
    ];
    let (status, _) = http
        .send_with_headers("POST", &format!("{}/destinations", c.base), &forged)
        .await;
    assert_eq!(status, StatusCode::CREATED);
    a.member.add_to_destination(&dest("victim")).await.unwrap();
    let url = format!("{}/destinations/victim", c.base);
    assert_eq!(http.send("GET", &url).await, (StatusCode::OK, "a".into()));
    // on a fenced call the coordinator's own epoch replaces the client's
    let (status, body) = http.send_with_headers("GET", &url, &forged).await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "a"));
    assert_eq!(http.send("GET", &url).await, (StatusCode::OK, "a".into()));
    assert_eq!(c.registry.metrics().stale_owner_refusals, 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_pod_back_from_a_lapse_refuses_routes_cached_before_it() {
    let valkey = valkey().await;
    let (mut a, b, c1, _c2, d, http, [url1, url2]) = two_of_each("healed").await;
    // a is cut from Valkey long enough for its record to expire and for
    // another coordinator to move the destination to b
    let urls = [url1.as_str(), url2.as_str()];
    failed_over_behind_c1(&valkey, &mut a, &c1, &d, &http, urls).await;

    // the partition heals: a heartbeats again and its lease is back
    a.restart_heartbeat();
    let member = a.member.clone();
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = member.clone();
            async move { m.registration_live() }
        })
        .await
    );
    // c1's cache still routes to a at the epoch from before the lapse
    let (a_hits, b_hits) = (a.hits(), b.hits());
    assert_eq!(http.send("GET", &url1).await, (StatusCode::OK, "b".into()));
    assert_eq!(
        a.hits(),
        a_hits,
        "the pod back from its lapse did not serve"
    );
    assert_eq!(b.hits(), b_hits + 1, "the owner served it, once");
    assert_eq!(c1.registry.metrics().stale_owner_refusals, 1);
}

/// A pod restarted under a new id at its old address gets the routes warm
/// caches hold for its predecessor. Its first sight finds it outside the
/// set; the same route again must be read again and refused again, never
/// admitted by what the refusal remembered (chaos found two pods serving
/// one destination that way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_route_meant_for_another_member_is_refused_every_time() {
    let (a, b, _c1, _c2, d, http, _) = two_of_each("inherited").await;
    let epoch = a.member.add_to_destination(&d).await.unwrap().to_string();
    // what a cache holding (a, epoch) sends once b has a's address
    let at_b = format!("http://{}/destinations/inherited", b.addr);
    let route = [
        (EPOCH_HEADER, epoch.as_str()),
        (ROUTED_DESTINATION_HEADER, "inherited"),
    ];
    for attempt in 0..3 {
        let (status, body) = http.send_with_headers("GET", &at_b, &route).await;
        assert_eq!(status, StatusCode::MISDIRECTED_REQUEST, "attempt {attempt}");
        assert!(body.contains("not_a_member"), "attempt {attempt}: {body}");
    }
    assert_eq!(b.hits(), 0, "b never served a destination it is not in");
}
