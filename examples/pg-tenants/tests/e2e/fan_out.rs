//! Fanned-out tenants: a saturated tenant spreads to a second pod, and keeps
//! being served when one of its pods is killed.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use crate::{Fleet, Opts, bounded};

/// A pool of 2 that saturates after 200 ms of queueing.
fn saturating() -> Opts {
    Opts {
        pool_size: 2,
        queue_threshold_ms: 200,
        cache_ttl_ms: 300,
        ..Opts::default()
    }
}

impl Fleet {
    /// Saturates `tenant` with waves of 12 concurrent slow calls on a pool
    /// of 2 until a second pod served it; the pods that served.
    async fn fan_out(&self, tenant: &str) -> BTreeSet<String> {
        let mut seen = BTreeSet::new();
        let deadline = Instant::now() + Duration::from_secs(40);
        while seen.len() < 2 {
            assert!(Instant::now() < deadline, "never fanned out: {seen:?}");
            let path = format!("/tenants/{tenant}/sleep/0.5");
            let calls = (0..12).map(|_| self.ok("GET", &path, ""));
            for (pod, _) in futures::future::join_all(calls).await {
                seen.insert(pod);
            }
        }
        seen
    }

    /// The pods that serve `n` plain reads of `tenant`'s `kv/k`.
    async fn serving(&self, tenant: &str, n: usize) -> BTreeSet<String> {
        let mut served = BTreeSet::new();
        for _ in 0..n {
            served.insert(
                self.ok("GET", &format!("/tenants/{tenant}/kv/k"), "")
                    .await
                    .0,
            );
        }
        served
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn saturated_tenant_fans_out_to_a_second_pod() {
    bounded(async {
        let f = Fleet::start(saturating()).await;
        let t = f.tenant("busy");
        let (home, _) = f.ok("PUT", &format!("/tenants/{t}/kv/k"), "v").await;
        let seen = f.fan_out(&t).await;
        assert!(
            seen.contains(&home),
            "the first pod keeps serving: {seen:?}"
        );
        // both pods serve plain calls too
        let served = f.serving(&t, 10).await;
        // (a fanned-out pod may itself saturate and fan out further)
        assert!(
            served.len() >= 2,
            "several pods serve the tenant: {served:?}"
        );
        assert!(
            served.contains(&home),
            "the first pod still serves: {served:?}"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn fanned_out_tenant_keeps_serving_when_one_of_its_pods_is_killed() {
    bounded(async {
        let mut f = Fleet::start(saturating()).await;
        let t = f.tenant("wide");
        let (home, _) = f.ok("PUT", &format!("/tenants/{t}/kv/k"), "v").await;
        f.fan_out(&t).await;
        let set = f.serving(&t, 12).await;
        assert!(set.len() >= 2, "fanned out: {set:?}");
        // lose a pod of the set (not the first: it is where the set began)
        let victim = set.iter().find(|p| **p != home).unwrap().clone();
        f.procs.kill(&victim);

        // every call while the pod is lost, until its record has expired
        // (TTL 2 s) and well after, is answered by the others
        let lost_at = Instant::now();
        let mut answered = 0;
        let mut by = BTreeSet::new();
        let path = format!("/tenants/{t}/kv/k");
        while lost_at.elapsed() < Duration::from_secs(5) {
            let calls = (0..4).map(|_| f.call("GET", &path, ""));
            for r in futures::future::join_all(calls).await {
                assert_eq!(
                    r.status,
                    200,
                    "a cold moment {:?} after the loss: {r:?}",
                    lost_at.elapsed()
                );
                assert_eq!(r.value(), Some("v"), "{r:?}");
                let pod = r.pod.unwrap();
                assert_ne!(pod, victim, "the killed pod cannot answer");
                by.insert(pod);
                answered += 1;
            }
        }
        assert!(answered >= 20, "too few calls to tell: {answered}");
        assert!(by.contains(&home), "the first pod kept serving: {by:?}");
        f.delisted(&victim).await;
        // the tenant is still served by its surviving pods, with its data
        let served = f.serving(&t, 6).await;
        assert!(!served.contains(&victim), "{served:?}");
    })
    .await;
}
