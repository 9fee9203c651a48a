//! Two `pg-coordinator` processes on one Valkey race first touch and
//! failover for the same tenants: each tenant ends on exactly one pod, as
//! both coordinators and the pods' PostgreSQL pools tell.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use crate::{Fleet, Opts, bounded};

impl Fleet {
    /// Sends `method kv/k` for every tenant through every coordinator at
    /// once; each tenant's answers must come from one pod, which is
    /// returned.
    async fn race(&self, tenants: &[String], method: &str) -> BTreeMap<String, String> {
        let calls = tenants.iter().flat_map(|t| {
            self.coordinators.iter().map(move |via| async move {
                let path = format!("/tenants/{t}/kv/k");
                let (pod, _) = self.ok_via(via, method, &path, &format!("v-{t}")).await;
                (t.clone(), pod)
            })
        });
        let mut pods = BTreeMap::<String, BTreeSet<String>>::new();
        for (t, pod) in futures::future::join_all(calls).await {
            pods.entry(t).or_default().insert(pod);
        }
        pods.into_iter()
            .map(|(t, on)| {
                assert_eq!(on.len(), 1, "{t} was served by two pods at once: {on:?}");
                (t, on.into_iter().next().unwrap())
            })
            .collect()
    }

    /// Each tenant is on `owner[tenant]` alone: through every coordinator,
    /// and in PostgreSQL (only that pod has a pool for it).
    async fn on_one_pod(&self, owner: &BTreeMap<String, String>) {
        for (t, pod) in owner {
            for via in &self.coordinators {
                let (served, json) = self
                    .ok_via(via, "GET", &format!("/tenants/{t}/kv/k"), "")
                    .await;
                assert_eq!(&served, pod, "{via} routes {t} elsewhere");
                assert_eq!(json["value"], format!("v-{t}"));
            }
            // (a killed pod's backends leave pg_stat_activity shortly after)
            let only = BTreeSet::from([pod.clone()]);
            assert!(
                self.eventually(Duration::from_secs(5), async |f| f.pods_with_pools(t).await
                    == only)
                    .await,
                "{t}: pools on other pods than its owner {pod}: {:?}",
                self.pods_with_pools(t).await
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn two_coordinators_racing_first_touch_and_failover_leave_each_tenant_on_one_pod() {
    bounded(async {
        // random picks: two coordinators that did not claim atomically
        // would choose different pods for most tenants
        let mut f = Fleet::start(Opts {
            strategy: "random",
            coordinators: 2,
            ..Opts::default()
        })
        .await;
        let tenants = f.tenants("race", 12);
        let owner = f.race(&tenants, "PUT").await;
        f.on_one_pod(&owner).await;

        // the pod with the most tenants dies; both coordinators race its
        // tenants' failover
        let mut count = BTreeMap::<&String, usize>::new();
        for pod in owner.values() {
            *count.entry(pod).or_default() += 1;
        }
        let victim = count.iter().max_by_key(|(_, n)| **n).unwrap().0.to_string();
        let orphans: Vec<String> = owner
            .iter()
            .filter(|(_, p)| **p == victim)
            .map(|(t, _)| t.clone())
            .collect();
        f.procs.kill(&victim);
        f.delisted(&victim).await;
        let moved = f.race(&orphans, "GET").await;
        for (t, pod) in &moved {
            assert_ne!(pod, &victim, "{t} stayed on the killed pod");
        }
        let mut now = owner.clone();
        now.extend(moved);
        f.on_one_pod(&now).await;
    })
    .await;
}
