//! End to end: real `pg-pod` and `pg-coordinator` processes against a real
//! PostgreSQL (`PG_URL`) and Valkey/Redis (`VALKEY_URL`).
//!
//! Run with `cargo xtask test-drivers --engine pg-example`, which starts both
//! servers. Each test starts its own fleet (three pods and one or two
//! coordinators on free ports, a fresh Valkey key prefix, fresh tenant ids)
//! and kills every process it started when it ends, passes or fails. The
//! harness is `e2e/fleet.rs`; the design's scenarios have a module each.

#![allow(clippy::unwrap_used, clippy::expect_used, missing_docs)]

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

#[path = "e2e/browser.rs"]
mod browser;
#[path = "e2e/cancel.rs"]
mod cancel;
#[path = "e2e/client_session.rs"]
mod client_session;
#[path = "e2e/fan_out.rs"]
mod fan_out;
#[path = "e2e/fleet.rs"]
mod fleet;
#[path = "e2e/fleet_load.rs"]
mod fleet_load;
#[path = "e2e/least_loaded.rs"]
mod least_loaded;
#[path = "e2e/limits.rs"]
mod limits;
#[path = "e2e/live.rs"]
mod live;
#[path = "e2e/two_coordinators.rs"]
mod two_coordinators;

use fleet::{Fleet, Opts, bounded};

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn tenants_spread_over_pods_and_reads_are_tagged() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let tenants = f.tenants("t", 5);
        let owner = f.touch(&tenants).await;
        let used: BTreeSet<&String> = owner.values().collect();
        assert_eq!(
            used.len(),
            3,
            "round-robin puts five tenants on all three pods: {owner:?}"
        );
        for _ in 0..3 {
            for t in &tenants {
                let (pod, json) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
                assert_eq!(pod, owner[t], "{t} is sticky to its pod");
                assert_eq!(json["value"], format!("v-{t}"));
            }
        }
        // the data lives in PostgreSQL, one schema per tenant
        for t in &tenants {
            let row =
                f.pg.query_one(&format!("SELECT v FROM \"t_{t}\".kv WHERE k = 'k'"), &[])
                    .await
                    .unwrap();
            assert_eq!(row.get::<_, String>(0), format!("v-{t}"));
        }
        let r = f
            .call("GET", &format!("/tenants/{}/kv/missing", tenants[0]), "")
            .await;
        assert_eq!(r.status, 404, "{r:?}");
        assert_eq!(r.pod.as_ref(), Some(&owner[&tenants[0]]));
        // malformed tenant ids are refused by the coordinator
        for bad in ["bad.id", "a%20b", &"x".repeat(65)] {
            let r = f.call("GET", &format!("/tenants/{bad}/kv/k"), "").await;
            assert_eq!(r.status, 400, "{bad}: {r:?}");
            assert_eq!(r.pod, None, "{bad} reached a pod");
        }
        // load = open connections, published by the heartbeat
        assert!(
            f.eventually(Duration::from_secs(5), async |f| {
                let loads = f.pod_loads_via(&f.coordinator).await;
                loads.values().all(|load| *load >= 1)
            })
            .await,
            "every pod publishes its open connections as load"
        );
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn transactions_commit_atomically_and_rollback_leaves_nothing() {
    bounded(async {
        let f = Fleet::start(Opts::default()).await;
        let t = f.tenant("bank");
        let (home, _) = f.ok("PUT", &format!("/tenants/{t}/kv/seed"), "0").await;
        let kv = |key: &str| format!("/tenants/{t}/kv/{key}");

        let (pod, lock) = f.begin(&t).await;
        assert_eq!(pod, home);
        assert_eq!(lock.len(), 32, "a 128-bit lock id");
        let tx = |key: &str| format!("/transactions/{lock}/kv/{key}");
        for (method, key, body) in [("PUT", "a", "1"), ("PUT", "b", "2"), ("DELETE", "seed", "")] {
            let (pod, _) = f.ok(method, &tx(key), body).await;
            assert_eq!(pod, home, "every call of the transaction lands on its pod");
        }
        let (_, own) = f.ok("GET", &tx("a"), "").await;
        assert_eq!(own["value"], "1", "the transaction sees its own writes");
        // nothing is visible outside before the commit
        assert_eq!(f.status("GET", &kv("a"), "").await, 404);
        assert_eq!(f.status("GET", &kv("b"), "").await, 404);
        assert_eq!(f.value_at(&kv("seed")).await.as_deref(), Some("0"));
        let (_, done) = f
            .ok("POST", &format!("/transactions/{lock}/commit"), "")
            .await;
        assert_eq!(done["committed"], true);
        assert_eq!(f.value_at(&kv("a")).await.as_deref(), Some("1"));
        assert_eq!(f.value_at(&kv("b")).await.as_deref(), Some("2"));
        assert_eq!(f.status("GET", &kv("seed"), "").await, 404);
        let after = f.call("PUT", &tx("c"), "3").await;
        assert_eq!(
            after.status, 404,
            "a committed transaction's lock is gone: {after:?}"
        );

        // rollback
        let (_, lock) = f.begin(&t).await;
        let tx = |key: &str| format!("/transactions/{lock}/kv/{key}");
        f.ok("PUT", &tx("x"), "9").await;
        f.ok("PUT", &tx("a"), "changed").await;
        let (_, done) = f
            .ok("POST", &format!("/transactions/{lock}/rollback"), "")
            .await;
        assert_eq!(done["rolled_back"], true);
        assert_eq!(f.status("GET", &kv("x"), "").await, 404);
        assert_eq!(f.value_at(&kv("a")).await.as_deref(), Some("1"));
        assert_eq!(f.status("GET", &tx("x"), "").await, 404);
        // malformed lock ids never reach Valkey or a pod
        let r = f.call("GET", "/transactions/not-a-lock/kv/x", "").await;
        assert_eq!((r.status, r.pod), (400, None));
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn forgotten_transactions_are_rolled_back() {
    bounded(async {
        let f = Fleet::start(Opts {
            tx_idle_timeout_ms: 1_000,
            tx_max_lifetime_ms: 3_000,
            ..Opts::default()
        })
        .await;
        // idle: left alone, rolled back after the idle timeout
        let t = f.tenant("idle");
        let (_, lock) = f.begin(&t).await;
        f.ok("PUT", &format!("/transactions/{lock}/kv/k"), "v")
            .await;
        assert_eq!(f.idle_in_transaction(&t).await, 1);
        // watch PostgreSQL, not the transaction (a call would keep it alive)
        assert!(
            f.eventually(Duration::from_secs(10), async |f| f
                .idle_in_transaction(&t)
                .await
                == 0)
                .await,
            "an idle transaction is rolled back"
        );
        let r = f
            .call("GET", &format!("/transactions/{lock}/kv/k"), "")
            .await;
        assert_eq!(r.status, 404, "its lock is released: {r:?}");
        assert_eq!(
            f.status("GET", &format!("/tenants/{t}/kv/k"), "").await,
            404
        );

        // busy but too long: rolled back after the max lifetime
        let t = f.tenant("long");
        let (_, lock) = f.begin(&t).await;
        let began = Instant::now();
        loop {
            let r = f
                .call("PUT", &format!("/transactions/{lock}/kv/k"), "v")
                .await;
            if r.status == 404 {
                break;
            }
            assert_eq!(r.status, 200, "{r:?}");
            assert!(
                began.elapsed() < Duration::from_secs(15),
                "never rolled back"
            );
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
        assert_eq!(
            f.status("GET", &format!("/tenants/{t}/kv/k"), "").await,
            404
        );
        assert_eq!(f.idle_in_transaction(&t).await, 0);
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs PostgreSQL and Valkey: run cargo xtask test-drivers --engine pg-example"]
async fn killed_pod_fails_over_keeping_data() {
    bounded(async {
        let mut f = Fleet::start(Opts::default()).await;
        let tenants = f.tenants("t", 5);
        let owner = f.touch(&tenants).await;
        let victim = owner[&tenants[0]].clone();
        let orphans: Vec<&String> = tenants.iter().filter(|t| owner[*t] == victim).collect();
        let (pod, lock) = f.begin(&tenants[0]).await;
        assert_eq!(pod, victim);
        f.ok("PUT", &format!("/transactions/{lock}/kv/uncommitted"), "x")
            .await;

        f.procs.kill(&victim);

        // the open transaction fails cleanly: an error status, no hang
        let r = f
            .call("PUT", &format!("/transactions/{lock}/kv/more"), "y")
            .await;
        assert!([404, 502, 503].contains(&r.status), "{r:?}");
        // its member record expires
        f.delisted(&victim).await;
        // its tenants move on their next request, with their data
        for t in &orphans {
            let (pod, json) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
            assert_ne!(pod, victim);
            assert_eq!(json["value"], format!("v-{t}"));
            let (again, _) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
            assert_eq!(again, pod, "{t} sticks to its new pod");
        }
        for t in tenants.iter().filter(|t| owner[*t] != victim) {
            let (pod, _) = f.ok("GET", &format!("/tenants/{t}/kv/k"), "").await;
            assert_eq!(pod, owner[t], "other tenants stay where they were");
        }
        // the lost transaction left nothing and keeps failing cleanly
        let r = f
            .call("GET", &format!("/transactions/{lock}/kv/uncommitted"), "")
            .await;
        assert!([404, 502, 503].contains(&r.status), "{r:?}");
        let uncommitted = format!("/tenants/{}/kv/uncommitted", tenants[0]);
        assert_eq!(f.status("GET", &uncommitted, "").await, 404);
        // ... and the caller retries it on the tenant's new pod
        let (pod, lock) = f.begin(&tenants[0]).await;
        assert_ne!(pod, victim);
        f.ok("PUT", &format!("/transactions/{lock}/kv/uncommitted"), "x")
            .await;
        f.ok("POST", &format!("/transactions/{lock}/commit"), "")
            .await;
        assert_eq!(f.value_at(&uncommitted).await.as_deref(), Some("x"));
    })
    .await;
}
