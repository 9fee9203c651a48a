//! `pg-coordinator --strategy least-loaded` end to end: new tenants go to
//! the pods with the smallest reported load (open PostgreSQL connections).

use std::collections::BTreeMap;
use std::time::Duration;

use crate::{Fleet, Opts, bounded};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn least_loaded_strategy_sends_new_tenants_away_from_the_loaded_pod() {
    bounded(async {
        let f = Fleet::start(Opts {
            strategy: "least-loaded",
            pool_size: 8,
            ..Opts::default()
        })
        .await;
        // one pod carries a heavy tenant: 6 open transactions, 6 connections
        let heavy = f.tenant("heavy");
        let (busy, _) = f.ok("PUT", &format!("/tenants/{heavy}/kv/k"), "v").await;
        for _ in 0..6 {
            let (pod, _) = f.begin(&heavy).await;
            assert_eq!(pod, busy);
        }
        let loaded = async |f: &Fleet, pod: &str, at_least: i64| {
            f.pod_loads_via(&f.coordinator).await.get(pod).copied() >= Some(at_least)
        };
        assert!(
            f.eventually(Duration::from_secs(5), async |f| loaded(f, &busy, 6).await)
                .await,
            "the busy pod reports its connections: {:?}",
            f.pod_loads_via(&f.coordinator).await
        );

        // six new tenants, one at a time, each after the loads it caused
        // were reported: none goes to the busy pod, the others share them
        let mut per_pod = BTreeMap::<String, i64>::new();
        for t in f.tenants("light", 6) {
            let (pod, _) = f.ok("PUT", &format!("/tenants/{t}/kv/k"), "v").await;
            let count = per_pod.entry(pod.clone()).or_default();
            *count += 1;
            let want = *count;
            assert!(
                f.eventually(Duration::from_secs(5), async |f| loaded(f, &pod, want)
                    .await)
                    .await,
                "{pod} reports its new connection"
            );
        }
        assert_eq!(
            per_pod.get(&busy),
            None,
            "the loaded pod got new tenants: {per_pod:?}"
        );
        let counts: Vec<i64> = per_pod.values().copied().collect();
        assert_eq!(counts, [3, 3], "the two idle pods share them: {per_pod:?}");
        let loads = f.pod_loads_via(&f.coordinator).await;
        assert!(
            loads[&busy] > per_pod.values().copied().max().unwrap(),
            "{loads:?}"
        );
    })
    .await;
}
