//! Allocation per the design: the strategy runs at first touch, failover and
//! fan-out only, so traffic between claims does not steer where new
//! destinations land.

use std::sync::Arc;

use axum::http::StatusCode;
use coordinator::strategy::{DynStrategy, LeastLoaded, RoundRobin};

use crate::common::*;

/// 2 pods, 10 new tenants claimed by first touch with 0..=3 calls to
/// earlier tenants between claims: 5 / 5, whatever the traffic.
async fn new_tenants_split_evenly(strategy: DynStrategy) {
    let p = prefix();
    let mut a = TestPod::start(&p, "node:pod:1", PodOptions::default()).await;
    let mut b = TestPod::start(&p, "user@pod-2", PodOptions::default()).await;
    let c = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            strategy,
            ..CoordinatorOptions::default()
        },
    )
    .await;
    let http = Http::new();
    let v = valkey().await;
    for i in 0..10 {
        let (status, _) = http
            .send("GET", &format!("{}/destinations/tenant-{i}/q", c.base))
            .await;
        assert_eq!(status, StatusCode::OK, "first touch of tenant-{i}");
        for k in 0..(i % 4) {
            let earlier = k % (i + 1);
            let (status, _) = http
                .send(
                    "GET",
                    &format!("{}/destinations/tenant-{earlier}/q", c.base),
                )
                .await;
            assert_eq!(status, StatusCode::OK);
        }
    }
    let mut on_a = 0;
    for i in 0..10 {
        let set = smembers(&v, &format!("{p}:destination:tenant-{i}")).await;
        assert_eq!(set.len(), 1, "tenant-{i}: {set:?}");
        if set.contains("node:pod:1") {
            on_a += 1;
        }
    }
    assert_eq!(on_a, 5, "tenants on node:pod:1");
    assert_eq!(c.registry.metrics().claims, 10);
    a.kill().await;
    b.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn round_robin_claims_ignore_the_traffic_in_between() {
    new_tenants_split_evenly(Arc::new(RoundRobin::new())).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn least_loaded_ties_ignore_the_traffic_in_between() {
    new_tenants_split_evenly(Arc::new(LeastLoaded::new())).await;
}
