//! Registry and Member against a real Valkey/Redis (`VALKEY_URL`).

#![allow(clippy::unwrap_used, clippy::expect_used)]

#[path = "registry/coalesce.rs"]
mod coalesce;
mod common;
#[path = "registry/epoch.rs"]
mod epoch;
#[path = "registry/tls.rs"]
mod tls;

use std::sync::Arc;
use std::time::Duration;

use common::*;
use coordinator::strategy::{PickContext, RoundRobin, Strategy};
use coordinator::{
    DestinationId, MemberAddress, MemberConfig, MemberRecord, Resolution, ResolveOptions,
    RouteSource, ValkeyClient,
};
use fred::prelude::*;

const NO_CLAIM: ResolveOptions = ResolveOptions {
    claim_on_miss: false,
    reassign_orphans: false,
};

/// The settings of member `id` at a loopback `port`, under `prefix`.
fn member_config(prefix: &str, id: &str, port: u16) -> MemberConfig {
    let address = MemberAddress::parse(&format!("http://127.0.0.1:{port}")).unwrap();
    let mut config = MemberConfig::new(mid(id), address);
    config.prefix = prefix.to_owned();
    config
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn first_touch_claims_a_live_member_then_the_cache_costs_nothing() {
    let p = prefix();
    let pod = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let reg = registry(&p, Some(Default::default()), Arc::new(RoundRobin::new())).await;
    let d = dest("tenant-1");

    assert!(matches!(
        reg.route(&d, NO_CLAIM).await.unwrap(),
        Resolution::Unbound
    ));
    assert!(!reg.has_binding(&d).await.unwrap());

    let res = reg.route(&d, ResolveOptions::default()).await.unwrap();
    let route = res.route().expect("claimed");
    assert_eq!(route.source, RouteSource::Claimed);
    assert_eq!(&route.member.id, pod.id());
    assert_eq!(
        route.member.address.as_str(),
        format!("http://{}", pod.addr)
    );
    let v = valkey().await;
    assert_eq!(
        smembers(&v, &reg.keys().destination(&d)).await,
        ["pod-a".to_owned()].into()
    );
    assert!(reg.has_binding(&d).await.unwrap());

    let before = reg.metrics().valkey_round_trips;
    for _ in 0..5 {
        let r = reg.route(&d, ResolveOptions::default()).await.unwrap();
        assert_eq!(r.route().unwrap().source, RouteSource::Cache);
    }
    assert_eq!(
        reg.metrics().valkey_round_trips,
        before,
        "cache hits cost zero round trips"
    );
    assert_eq!(reg.metrics().claims, 1);
}

/// Picks the member with a fixed id, to force two registries to disagree.
#[derive(Debug)]
struct Prefer(&'static str);

impl Strategy for Prefer {
    fn pick(&self, c: &[MemberRecord], _: &PickContext<'_>) -> Option<usize> {
        c.iter().position(|m| m.id.as_str() == self.0)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn concurrent_first_touch_by_two_registries_ends_on_one_pod() {
    let p = prefix();
    let _a = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let _b = TestPod::start(&p, "pod-b", PodOptions::default()).await;
    let r1 = registry(&p, None, Arc::new(Prefer("pod-a"))).await;
    let r2 = registry(&p, None, Arc::new(Prefer("pod-b"))).await;
    let v = valkey().await;
    // several rounds: the two claims are not always in flight at once
    for round in 0..20 {
        let d = dest(&format!("contended-{round}"));
        let (x, y) = tokio::join!(
            r1.route(&d, ResolveOptions::default()),
            r2.route(&d, ResolveOptions::default())
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        let set = smembers(&v, &r1.keys().destination(&d)).await;
        assert_eq!(set.len(), 1, "round {round}: {set:?}");
        // both registries route to the one member that won
        let (x, y) = (x.route().unwrap(), y.route().unwrap());
        assert_eq!(x.member.id, y.member.id, "round {round}");
        assert!(set.contains(x.member.id.as_str()));
        assert_eq!(x.set.len(), 1);
        assert_eq!(y.set.len(), 1);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn concurrent_failover_by_two_registries_ends_on_one_pod() {
    let p = prefix();
    let opts = || PodOptions {
        ttl: Duration::from_secs(1),
        heartbeat: Duration::from_millis(200),
        ..Default::default()
    };
    let mut dead = TestPod::start(&p, "pod-dead", opts()).await;
    let _a = TestPod::start(&p, "pod-a", opts()).await;
    let _b = TestPod::start(&p, "pod-b", opts()).await;
    let r1 = registry(&p, None, Arc::new(Prefer("pod-a"))).await;
    let r2 = registry(&p, None, Arc::new(Prefer("pod-b"))).await;
    let dests: Vec<_> = (0..10).map(|i| dest(&format!("orphan-{i}"))).collect();
    for d in &dests {
        r1.add_pod_to_destination(d, dead.id()).await.unwrap();
    }
    dead.kill().await;
    let v = valkey().await;
    let member_key = r1.keys().member(dead.id());
    assert!(
        eventually(Duration::from_secs(4), || async {
            !exists(&v, &member_key).await
        })
        .await
    );
    for d in &dests {
        let (x, y) = tokio::join!(
            r1.route(d, ResolveOptions::default()),
            r2.route(d, ResolveOptions::default())
        );
        let (x, y) = (x.unwrap(), y.unwrap());
        let set = smembers(&v, &r1.keys().destination(d)).await;
        assert_eq!(set.len(), 1, "{d}: {set:?}");
        assert_eq!(
            x.route().unwrap().member.id,
            y.route().unwrap().member.id,
            "{d}"
        );
    }
}

/// Pods `pod-a` and `pod-b` (records of a second), a registry without a
/// cache, destination `name` bound to pod-a (and to pod-b when `both`);
/// then pod-a dies and its record expires. Pod-b, the registry, the
/// destination, a Valkey client.
async fn after_the_death_of_pod_a(
    name: &str,
    both: bool,
) -> (TestPod, coordinator::Registry, DestinationId, ValkeyClient) {
    let p = prefix();
    let opts = || PodOptions {
        ttl: Duration::from_secs(1),
        heartbeat: Duration::from_millis(200),
        ..Default::default()
    };
    let mut a = TestPod::start(&p, "pod-a", opts()).await;
    let b = TestPod::start(&p, "pod-b", opts()).await;
    let reg = registry(&p, None, Arc::new(RoundRobin::new())).await;
    let d = dest(name);
    reg.add_pod_to_destination(&d, a.id()).await.unwrap();
    if both {
        reg.add_pod_to_destination(&d, b.id()).await.unwrap();
    }
    a.kill().await;
    let v = valkey().await;
    assert!(member_record_expires(&v, &a, Duration::from_secs(4)).await);
    (b, reg, d, v)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn expired_member_leaves_an_orphan_that_is_reassigned() {
    let (b, reg, d, v) = after_the_death_of_pod_a("orphan", false).await;

    let orphan = ResolveOptions {
        claim_on_miss: false,
        reassign_orphans: false,
    };
    assert!(matches!(
        reg.resolve_destination(&d, orphan).await.unwrap(),
        Resolution::NoLiveMember
    ));

    let res = reg
        .resolve_destination(&d, ResolveOptions::default())
        .await
        .unwrap();
    let route = res.route().unwrap();
    assert!(route.reassigned());
    assert_eq!(&route.member.id, b.id());
    assert_eq!(
        smembers(&v, &reg.keys().destination(&d)).await,
        ["pod-b".to_owned()].into(),
        "dead member removed, fresh one added"
    );
    assert_eq!(reg.metrics().reassignments, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn partial_death_prunes_dead_members_and_routes_to_the_live_one() {
    let (b, reg, d, v) = after_the_death_of_pod_a("half", true).await;

    for _ in 0..3 {
        let res = reg.route(&d, NO_CLAIM).await.unwrap();
        let route = res.route().unwrap();
        assert_eq!(&route.member.id, b.id());
        assert!(!route.reassigned());
    }
    assert_eq!(
        smembers(&v, &reg.keys().destination(&d)).await,
        ["pod-b".to_owned()].into()
    );

    // the members set still names pod-a until someone lists live members
    assert!(smembers(&v, &reg.keys().members()).await.contains("pod-a"));
    let live = reg.list_live_members().await.unwrap();
    assert_eq!(
        live.iter().map(|m| m.id.as_str()).collect::<Vec<_>>(),
        ["pod-b"]
    );
    assert_eq!(
        smembers(&v, &reg.keys().members()).await,
        ["pod-b".to_owned()].into(),
        "dead id pruned from P:members"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn heartbeat_recreates_an_expired_record() {
    let p = prefix();
    let mut pod = TestPod::start(
        &p,
        "pod-a",
        PodOptions {
            ttl: Duration::from_secs(1),
            heartbeat: Duration::from_millis(200),
            ..Default::default()
        },
    )
    .await;
    let v = valkey().await;
    let key = pod.member.keys().member(pod.id());
    let members = pod.member.keys().members();
    let d = dest("t");
    let lock = pod.member.new_lock(&d, []).await.unwrap();
    let lock_key = pod.member.keys().lock(&lock);

    // let everything expire, as if the pod had stalled
    pod.stop_heartbeat().await;
    assert!(gone_within(&v, &key, Duration::from_secs(4)).await);
    let _: i64 = v.srem(&members, "pod-a").await.unwrap();
    assert!(gone_within(&v, &lock_key, Duration::from_secs(4)).await);

    pod.member.heartbeat().await.unwrap();
    let (addr, load): (Option<String>, Option<String>) =
        v.hmget(&key, vec!["address", "load"]).await.unwrap();
    assert_eq!(addr.unwrap(), format!("http://{}", pod.addr));
    assert_eq!(load.unwrap(), "0");
    let ttl: i64 = v.pttl(&key).await.unwrap();
    assert!(
        ttl > 0 && ttl <= 1000,
        "record has the member TTL, got {ttl}"
    );
    assert!(smembers(&v, &members).await.contains("pod-a"));
    let owner: Option<String> = v.hget(&lock_key, "podId").await.unwrap();
    assert_eq!(owner.as_deref(), Some("pod-a"), "held lock re-created");

    // and the background task does it too
    let _: i64 = v.del(&key).await.unwrap();
    let task = pod.member.start_heartbeat();
    assert!(eventually(Duration::from_secs(2), || async { exists(&v, &key).await }).await);
    task.stop().await;

    pod.member.deregister().await.unwrap();
    assert!(!exists(&v, &key).await);
    assert!(!exists(&v, &lock_key).await);
    assert!(!smembers(&v, &members).await.contains("pod-a"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn peers_load_and_destination_membership() {
    let p = prefix();
    let a = TestPod::start(&p, "pod-a", PodOptions::default()).await;
    let b = TestPod::start(&p, "pod-b", PodOptions::default()).await;
    let peers = a.member.list_peer_load().await.unwrap();
    assert_eq!(peers.len(), 1);
    assert_eq!(&peers[0].id, b.id());

    let d = dest("m");
    a.member.add_to_destination(&d).await.unwrap();
    b.member.add_to_destination(&d).await.unwrap();
    a.member.remove_from_destination(&d).await.unwrap();
    assert_eq!(a.member.destination_members(&d).await.unwrap(), ["pod-b"]);

    // a member cannot take over or unregister a lock it does not hold
    let lock = b.member.new_lock(&d, []).await.unwrap();
    assert!(matches!(
        a.member.register_lock(&lock, &d, []).await,
        Err(coordinator::Error::LockTaken(_))
    ));
    b.member
        .register_lock(&lock, &d, [("step".to_owned(), "2".to_owned())])
        .await
        .unwrap();
    assert!(
        a.member
            .register_lock(&lock, &d, [("podId".to_owned(), "x".to_owned())])
            .await
            .is_err(),
        "reserved metadata field"
    );
    assert!(!a.member.unregister_lock(&lock).await.unwrap());
    assert!(b.member.unregister_lock(&lock).await.unwrap());
    let v = valkey().await;
    assert!(!exists(&v, &b.member.keys().lock(&lock)).await);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn least_loaded_reads_fresh_loads_of_a_fanned_out_destination() {
    use coordinator::Member;
    use coordinator::strategy::LeastLoaded;
    use std::sync::atomic::{AtomicI64, Ordering};

    let p = prefix();
    let mk = |id: &str, port: u16, load: Arc<AtomicI64>| {
        let config = member_config(&p, id, port);
        async move {
            let m = Member::with_load_source(
                valkey().await,
                config,
                Arc::new(move || load.load(Ordering::SeqCst)),
            )
            .unwrap();
            m.register().await.unwrap();
            m
        }
    };
    let load_a = Arc::new(AtomicI64::new(5));
    let load_b = Arc::new(AtomicI64::new(1));
    let a = mk("pod-a", 1, load_a.clone()).await;
    let b = mk("pod-b", 2, load_b.clone()).await;
    let d = dest("big");
    a.add_to_destination(&d).await.unwrap();
    b.add_to_destination(&d).await.unwrap();

    let reg = registry(&p, Some(Default::default()), Arc::new(LeastLoaded::new())).await;
    let pick = || async {
        reg.route(&d, NO_CLAIM)
            .await
            .unwrap()
            .route()
            .unwrap()
            .member
            .id
            .clone()
    };
    assert_eq!(pick().await.as_str(), "pod-b");
    assert_eq!(pick().await.as_str(), "pod-b");

    // loads change: the warm cache still sees them, at one round trip per call
    load_a.store(0, Ordering::SeqCst);
    a.heartbeat().await.unwrap();
    let before = reg.metrics();
    assert_eq!(pick().await.as_str(), "pod-a");
    let after = reg.metrics();
    assert_eq!(after.cache_hits, before.cache_hits + 1);
    assert_eq!(after.valkey_round_trips, before.valkey_round_trips + 1);

    // equal loads: ties alternate
    load_b.store(0, Ordering::SeqCst);
    b.heartbeat().await.unwrap();
    let (x, y) = (pick().await, pick().await);
    assert_ne!(x, y);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn fan_out_asks_the_pods_configured_strategy() {
    use coordinator::Member;
    use coordinator::strategy::PickPurpose;
    use std::sync::Mutex;

    /// What a strategy was asked: destination, purpose, candidates.
    type Asked = (Option<String>, PickPurpose, Vec<String>);
    /// Picks the last candidate, and notes what it was asked.
    #[derive(Debug, Default)]
    struct Last(Mutex<Vec<Asked>>);
    impl Strategy for Last {
        fn pick(&self, c: &[MemberRecord], ctx: &PickContext<'_>) -> Option<usize> {
            let ids = c.iter().map(|m| m.id.as_str().to_owned()).collect();
            let dest = ctx.destination.map(|d| d.as_str().to_owned());
            self.0.lock().unwrap().push((dest, ctx.purpose, ids));
            c.len().checked_sub(1)
        }
    }

    let p = prefix();
    let last = Arc::new(Last::default());
    let mk = |id: &str, port: u16, strategy: Option<Arc<Last>>| {
        let mut config = member_config(&p, id, port);
        async move {
            if let Some(s) = strategy {
                config.fan_out_strategy = s;
            }
            let m = Member::new(valkey().await, config).unwrap();
            m.register().await.unwrap();
            m
        }
    };
    let a = mk("pod-a", 1, Some(last.clone())).await;
    let _b = mk("pod-b", 2, None).await;
    let _c = mk("pod-c", 3, None).await;
    let d = dest("hot");
    a.add_to_destination(&d).await.unwrap();

    // equal loads: the default (least-loaded) would take pod-b; the pod's
    // own strategy takes the last candidate
    assert_eq!(a.fan_out(&d).await.unwrap(), Some(mid("pod-c")));
    assert_eq!(
        *last.0.lock().unwrap(),
        [(
            Some("hot".to_owned()),
            PickPurpose::FanOut,
            vec!["pod-b".to_owned(), "pod-c".to_owned()]
        )],
        "asked once, for the destination, with the live peers outside the set"
    );
    assert_eq!(a.fan_out(&d).await.unwrap(), Some(mid("pod-b")));
    assert_eq!(a.fan_out(&d).await.unwrap(), None, "no peer left");

    // the default stays the least-loaded peer
    let d2 = dest("hot-2");
    let e = mk("pod-e", 5, None).await;
    assert!(format!("{:?}", e.config().fan_out_strategy).contains("LeastLoaded"));
    e.add_to_destination(&d2).await.unwrap();
    assert_eq!(e.fan_out(&d2).await.unwrap(), Some(mid("pod-a")));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn fleet_load_sums_the_live_members_reported_loads() {
    use coordinator::Member;
    use std::sync::atomic::{AtomicI64, Ordering};

    let p = prefix();
    let reg = registry(&p, Some(Default::default()), Arc::new(RoundRobin::new())).await;
    let empty = reg.fleet_load().await.unwrap();
    assert_eq!((empty.members, empty.total), (0, 0));
    assert!(empty.needs_more_pods(10.0));

    let loads = [7, 30, 5].map(|l| Arc::new(AtomicI64::new(l)));
    let mut members = Vec::new();
    for (i, load) in loads.iter().enumerate() {
        let load = load.clone();
        let m = Member::with_load_source(
            valkey().await,
            member_config(&p, &format!("pod-{i}"), 1 + i as u16),
            Arc::new(move || load.load(Ordering::SeqCst)),
        )
        .unwrap();
        m.register().await.unwrap();
        members.push(m);
    }
    let fleet = reg.fleet_load().await.unwrap();
    assert_eq!((fleet.members, fleet.total, fleet.max), (3, 42, 30));
    assert!(fleet.needs_more_pods(10.0) && !fleet.needs_more_pods(14.0));
    assert_eq!(fleet.pods_for(10.0), 5);

    // A member that deregisters no longer counts; a new load is seen at the
    // next heartbeat.
    members.pop().unwrap().deregister().await.unwrap();
    loads[0].store(1, Ordering::SeqCst);
    members[0].heartbeat().await.unwrap();
    let fleet = reg.fleet_load().await.unwrap();
    assert_eq!((fleet.members, fleet.total, fleet.max), (2, 31, 30));
}
