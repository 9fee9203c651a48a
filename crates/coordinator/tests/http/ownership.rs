//! The races of destination ownership, one test per case, against a real
//! Valkey/Redis: pods `zz` (the owner) and `aa` behind the fence, and two
//! coordinators with warm caches. Each case ends with a call through each
//! coordinator: both must reach the same pod, never two pods at once.

use std::sync::Arc;
use std::time::Duration;

use axum::http::StatusCode;
use coordinator::strategy::{PickContext, Strategy};
use coordinator::{
    AddressPolicy, CacheConfig, DestinationId, MemberRecord, ResolveOptions, ValkeyClient,
};

use crate::common::*;

fn fenced() -> PodOptions {
    PodOptions {
        fenced: true,
        ..PodOptions::default()
    }
}

/// Allocates to `aa` whenever it is a candidate (so that a claim that
/// should not happen, happens to another pod than the owner).
#[derive(Debug)]
struct PreferAa;

impl Strategy for PreferAa {
    fn pick(&self, candidates: &[MemberRecord], _: &PickContext<'_>) -> Option<usize> {
        candidates
            .iter()
            .position(|m| m.id.as_str() == "aa")
            .or((!candidates.is_empty()).then_some(0))
    }
}

/// A coordinator whose cache stays warm for the whole test.
fn warm() -> CoordinatorOptions {
    CoordinatorOptions {
        cache: Some(CacheConfig {
            ttl: Duration::from_secs(60),
            capacity: 100,
        }),
        strategy: Arc::new(PreferAa),
        ..CoordinatorOptions::default()
    }
}

/// The destination's URL through `c`.
fn url(c: &TestCoordinator, name: &str) -> String {
    format!("{}/destinations/{name}", c.base)
}

/// One call through each coordinator: the pods that served them must be
/// the same one.
async fn one_pod_serves(
    http: &Http,
    name: &str,
    c1: &TestCoordinator,
    c2: &TestCoordinator,
) -> String {
    let via1 = http.send("GET", &url(c1, name)).await;
    let via2 = http.send("GET", &url(c2, name)).await;
    assert_eq!(via1.0, StatusCode::OK, "via c1: {via1:?}");
    assert_eq!(
        via1, via2,
        "{name} served by two pods at once: {} through c1, {} through c2",
        via1.1, via2.1
    );
    via1.1
}

/// The start of every case: pods zz (owning `name`) and aa behind the
/// fence, c1 with the options `c1_options` makes (given aa), c2 with
/// [`warm`]'s.
struct Scene {
    p: String,
    valkey: ValkeyClient,
    zz: TestPod,
    aa: TestPod,
    c1: TestCoordinator,
    c2: TestCoordinator,
    http: Http,
    d: DestinationId,
}

impl Scene {
    async fn start(name: &str, c1_options: impl FnOnce(&TestPod) -> CoordinatorOptions) -> Scene {
        let p = prefix();
        let valkey = valkey().await;
        let zz = TestPod::start(&p, "zz", fenced()).await;
        let aa = TestPod::start(&p, "aa", fenced()).await;
        let c1 = TestCoordinator::start(&p, c1_options(&aa)).await;
        let c2 = TestCoordinator::start(&p, warm()).await;
        let http = Http::new();
        let d = dest(name);
        zz.member.add_to_destination(&d).await.unwrap();
        Scene {
            p,
            valkey,
            zz,
            aa,
            c1,
            c2,
            http,
            d,
        }
    }

    /// One call through c2, served by zz (the first one caches zz's route).
    async fn c2_reaches_zz(&self) {
        assert_eq!(
            self.http.send("GET", &url(&self.c2, self.d.as_str())).await,
            (StatusCode::OK, "zz".into())
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_claim_never_removes_an_owner_that_has_come_back() {
    let proxy = HoldProxy::start().await;
    let through_proxy = proxy.client().await;
    let mut s = Scene::start("tenant-x", |_| CoordinatorOptions {
        valkey: Some(through_proxy),
        ..warm()
    })
    .await;
    // c1 has run every script once (first touch of another destination)
    s.c1.registry
        .route(&dest("warm-up"), ResolveOptions::default())
        .await
        .unwrap();

    // zz's record expires (its heartbeats stop; it stays reachable)
    s.zz.stop_heartbeat().await;
    assert!(member_record_expires(&s.valkey, &s.zz, Duration::from_secs(5)).await);
    // c1 reads tenant-x: zz is dead; c1 acts on that read only later
    let mut hold = proxy.hold_next_reply();
    let (registry, target) = (s.c1.registry.clone(), s.d.clone());
    let resolving =
        tokio::spawn(async move { registry.route(&target, ResolveOptions::default()).await });
    hold.held().await;
    // zz heartbeats again (its lease back, the epoch bumped); c2 routes a
    // call to it and caches the route
    s.zz.restart_heartbeat();
    let member = s.zz.member.clone();
    assert!(
        eventually(Duration::from_secs(5), || {
            let m = member.clone();
            async move { m.registration_live() }
        })
        .await
    );
    s.c2_reaches_zz().await;
    // c1's claim runs now, on its read of zz as dead
    hold.release();
    let route = resolving.await.unwrap().unwrap();
    assert_eq!(
        one_pod_serves(&s.http, "tenant-x", &s.c1, &s.c2).await,
        "zz"
    );
    assert_eq!(
        route.route().map(|r| r.member.id.as_str()),
        Some("zz"),
        "c1 routed to the live owner: {route:?}"
    );
    let set = smembers(&s.valkey, &s.c2.registry.keys().destination(&s.d)).await;
    assert_eq!(
        set.into_iter().collect::<Vec<_>>(),
        ["zz"],
        "zz was never removed"
    );
    assert_eq!(s.aa.hits(), 0, "aa never served tenant-x");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_pod_restarted_under_the_same_id_refuses_routes_from_before_its_restart() {
    let scene = Scene::start("tenant-x", |_| warm()).await;
    scene.c2_reaches_zz().await;
    let Scene {
        p,
        valkey,
        mut zz,
        aa,
        c1,
        c2,
        http,
        ..
    } = scene;

    // zz crashes; its record expires; c1 fails tenant-x over to aa
    let address = zz.addr;
    zz.kill().await;
    assert!(member_record_expires(&valkey, &zz, Duration::from_secs(5)).await);
    drop(zz);
    assert_eq!(
        http.send("GET", &url(&c1, "tenant-x")).await,
        (StatusCode::OK, "aa".into())
    );
    // zz comes back as zz, at its old address (a fixed POD_ID)
    let zz = TestPod::start_at(&p, "zz", address, fenced()).await;

    // c2's cached route to zz is from before the failover
    assert_eq!(one_pod_serves(&http, "tenant-x", &c1, &c2).await, "aa");
    assert_eq!(zz.hits(), 0, "the restarted zz never served tenant-x");
    assert!(aa.hits() >= 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn an_address_policy_mismatch_never_reassigns_a_live_owner() {
    let m = mismatch().await;
    // c1 cannot forward to zz: it must not take tenant-x from it
    let (status, body) = m.http.send("GET", &url(&m.c1, "tenant-x")).await;
    assert_eq!(
        (status, m.aa.hits()),
        (StatusCode::SERVICE_UNAVAILABLE, 0),
        "c1 reassigned the live zz's destination: {body}"
    );
    assert!(body.contains("no_live_member"), "{body}");
    let (status, _) = m.http.send("DELETE", &url(&m.c1, "tenant-x")).await;
    assert_eq!(status, StatusCode::SERVICE_UNAVAILABLE, "nor deregister it");
    let set = smembers(&m.valkey, &m.c2.registry.keys().destination(&m.d)).await;
    assert_eq!(set.into_iter().collect::<Vec<_>>(), ["zz"]);
    m.c2_reaches_zz().await;
    assert_eq!(m.aa.hits(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn an_address_policy_mismatch_never_binds_a_second_pod_next_to_a_live_owner() {
    let m = mismatch().await;
    // c1 sees no member it may forward to: *pick and register* provisions
    // on aa, but must not bind aa next to the live zz
    let (status, body) = m.http.send("PUT", &url(&m.c1, "tenant-x")).await;
    let set = smembers(&m.valkey, &m.c2.registry.keys().destination(&m.d)).await;
    assert_eq!(
        set.iter().map(String::as_str).collect::<Vec<_>>(),
        ["zz"],
        "c1 bound a second pod next to the live zz ({status}: {body})"
    );
    assert_eq!(status, StatusCode::CONFLICT, "{body}");
    assert!(body.contains("bound_elsewhere"), "{body}");
    m.c2_reaches_zz().await;
    assert_eq!(m.aa.hits(), 1, "only the PUT");
}

/// How the owner leaves the destination.
#[derive(Clone, Copy)]
enum Leave {
    /// `Member::remove_from_destination`.
    ByItself,
    /// `DELETE /destinations/{d}` through a coordinator, forwarded to it.
    Deleted,
}

/// zz owns `name` and c2 caches that; zz leaves; c1's first touch claims
/// `name` for aa; then c2's cached route must not be served by zz.
async fn owner_leaves(name: &str, how: Leave) {
    let s = Scene::start(name, |_| warm()).await;
    s.c2_reaches_zz().await;
    match how {
        Leave::ByItself => {
            s.zz.member.remove_from_destination(&s.d).await.unwrap();
        }
        // forwarded to zz, which answers 200; then the set is deleted
        Leave::Deleted => assert_eq!(
            s.http.send("DELETE", &url(&s.c1, name)).await,
            (StatusCode::OK, "zz".into())
        ),
    }
    // first touch through c1 claims it for aa
    assert_eq!(
        s.http.send("GET", &url(&s.c1, name)).await,
        (StatusCode::OK, "aa".into())
    );
    // c2's cached route to zz is from before zz left
    assert_eq!(one_pod_serves(&s.http, name, &s.c1, &s.c2).await, "aa");
    let served = match how {
        Leave::ByItself => 1,
        Leave::Deleted => 2,
    };
    assert_eq!(s.zz.hits(), served, "zz served nothing after it left");
    assert_eq!(s.aa.hits(), 3);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_pod_that_leaves_a_destination_refuses_routes_from_before_it_left() {
    owner_leaves("left", Leave::ByItself).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn a_pod_that_answered_a_delete_of_its_destination_refuses_routes_from_before_it() {
    owner_leaves("deleted", Leave::Deleted).await;
}

/// Pods zz (owning tenant-x, as c2 has seen) and aa; coordinator c1 may
/// forward to aa's port only, c2 to any address.
async fn mismatch() -> Scene {
    let scene = Scene::start("tenant-x", |aa| {
        let port = aa.addr.port();
        CoordinatorOptions {
            member_addresses: AddressPolicy::default().allow_ports(port..=port),
            ..warm()
        }
    })
    .await;
    scene.c2_reaches_zz().await;
    scene
}
