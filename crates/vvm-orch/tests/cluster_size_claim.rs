//! Issue 34, case 1: the `--cluster-size` claim cannot lapse while a
//! leader of that size leads. Nodes of size 1 and size 2 on one store
//! (paused tokio time, storage-mem); the checks read the ledger of who ran
//! services when: runs of two sizes must never overlap.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod common;

use std::{sync::Arc, time::Duration};

use common::{
    config,
    faults::{Calls, KeyFaults},
    launch,
    ledger::{Ledger, OnStop},
    request::ask,
};
use storage_mem::MemStorage;
use tokio::time::Instant;
use vvm_orch::{LaunchedVvm, ProblemSignal, VvmConfig, VvmProblem};

const D: Duration = Duration::from_secs(20);

fn sized(name: &str, size: u32) -> VvmConfig {
    let mut config = config(name);
    config.cluster_size = size;
    config.acquisition_duration = vvm_orch::ACQUIRE_FOREVER;
    config.acquisition_retry_pause = Duration::from_millis(500);
    config
}

/// A host: shuts its VVM down when it reports a problem, as `vvm-host` does.
fn host(vvm: LaunchedVvm, problem: ProblemSignal) -> tokio::task::JoinHandle<Option<VvmProblem>> {
    tokio::spawn(async move {
        problem.raised().await;
        vvm.shutdown().await.err()
    })
}

/// A node of `size` that is started again after every refusal, until `until`.
fn keep_trying(
    store: KeyFaults,
    ledger: Ledger,
    name: &'static str,
    size: u32,
    until: Instant,
) -> tokio::task::JoinHandle<u32> {
    tokio::spawn(async move {
        let mut refusals = 0;
        while Instant::now() < until {
            let (vvm, problem, _) = launch(
                sized(name, size),
                store.clone(),
                ledger.pipeline(name, size, D / 10),
            );
            tokio::select! {
                () = problem.raised() => {}
                () = tokio::time::sleep_until(until) => {}
            }
            if let Err(VvmProblem::ClusterSizeMismatch { .. }) = vvm.shutdown().await {
                refusals += 1;
            }
            tokio::time::sleep(Duration::from_millis(500)).await;
        }
        refusals
    })
}

/// Case 1: only the operations on the size claim fail, for 1.5 leases. A
/// leader whose size writes fail must stop before its claim can lapse, so
/// a node of size 2 that claims the size once the store heals never runs
/// beside it. (Before: the refresh ignored its errors, the claim expired
/// under the running size-1 leader, and size 2 led beside it.)
#[tokio::test(start_paused = true)]
async fn case1_the_size_claim_cannot_lapse_under_a_running_leader() {
    let store = KeyFaults::new(MemStorage::new());
    let ledger = Ledger::default();
    let (one, problem, _) = launch(
        sized("one", 1),
        store.clone(),
        ledger.pipeline("one", 1, D / 10),
    );
    one.wait_for_leadership().await.unwrap();
    let one = host(one, problem);
    let until = Instant::now() + D * 5;
    let two = keep_trying(store.clone(), ledger.clone(), "two", 2, until);
    tokio::time::sleep(D / 2).await;
    store.fail("size", Calls::All);
    // Healed between two of the leader's rounds (not on one).
    tokio::time::sleep(D * 3 / 2 + Duration::from_millis(1700)).await;
    store.heal();
    tokio::time::sleep_until(until).await;
    two.await.unwrap();
    one.abort();
    let overlaps = ledger.overlaps_between_groups();
    assert!(
        overlaps.is_empty(),
        "sizes 1 and 2 ran services at once: {overlaps:#?}"
    );
    assert!(
        ledger.leaders().contains(&"two".to_owned()),
        "size 2 never led after the store healed: {:?}",
        ledger.leaders()
    );
}

/// Case 1, during a hand-over: the leader's services take 1.5 leases to
/// stop. The claim is renewed with the lease while they stop, so size 2
/// cannot claim the size meanwhile. (Before: the refresh was not polled
/// while the monitor served the request, and the claim expired under the
/// stopping services.)
#[tokio::test(start_paused = true)]
async fn case1_the_size_claim_is_renewed_while_a_hand_over_stops_the_services() {
    let store = KeyFaults::new(MemStorage::new());
    let ledger = Ledger::default();
    let stopping = Arc::new(tokio::sync::Notify::new());
    let told = stopping.clone();
    let on_stop: OnStop = Arc::new(move || told.notify_one());
    let (one, problem, _) = launch(
        sized("one", 1),
        store.clone(),
        ledger.pipeline_with("one", 1, D * 3 / 2, on_stop),
    );
    one.wait_for_leadership().await.unwrap();
    let one = host(one, problem);
    let (next, next_problem, _) = launch(
        sized("next", 1),
        store.clone(),
        ledger.pipeline("next", 1, D / 10),
    );
    let next = host(next, next_problem);
    tokio::time::sleep(Duration::from_secs(2)).await;
    let _asked = ask(store.clone(), &sized("operator", 1), Some("next")).await;
    stopping.notified().await;
    let until = Instant::now() + D * 4;
    let two = keep_trying(store.clone(), ledger.clone(), "two", 2, until);
    tokio::time::sleep_until(until).await;
    two.await.unwrap();
    let overlaps = ledger.overlaps_between_groups();
    assert!(
        overlaps.is_empty(),
        "sizes 1 and 2 ran services at once: {overlaps:#?}"
    );
    one.abort();
    next.abort();
}
