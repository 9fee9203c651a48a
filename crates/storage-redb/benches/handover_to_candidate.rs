//! Hand-over to a waiting candidate (`Leadership::hand_over`): the time
//! from the leader's `hand_over` call to the candidate's `campaign`
//! returning the leadership, library level, in one process.
//!
//! `cargo bench -p storage-redb --bench handover_to_candidate`
//!
//! Cases: `storage-mem`, and the shared redb mode (two handles on one file,
//! as two processes would open it; watching on). Each round: the leader
//! holds the key, the other one campaigns (a visible candidate, woken by
//! the hand-over through the driver's watch), the leader hands over to it;
//! then the roles swap. The leader has no tracked work, so the figure is
//! the protocol's own cost: list the candidates, stop renewal, write the
//! marker, wake the candidate, which takes the marker, advances the fencing
//! counter and confirms.

#![allow(missing_docs, clippy::unwrap_used, clippy::expect_used)] // benchmark harness

mod support;

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use elections::{Elections, RecordingKiller};
use storage_mem::MemStorage;
use storage_redb::SharedRedbStorage;
use support::{report, report_head, runtime};
use ttl_storage::{DynTtlStorage, Key};

const LEASE: Duration = Duration::from_secs(5);
const ROUNDS: usize = 200;

async fn case(a: DynTtlStorage, b: DynTtlStorage, round_key: &str) -> Vec<Duration> {
    let key = Key::new(round_key).unwrap();
    let sides = [
        Elections::with_killer(a, RecordingKiller::new()),
        Elections::with_killer(b, RecordingKiller::new()),
    ];
    let mut leader = sides[0]
        .acquire_leadership(&key, "side-0", LEASE)
        .await
        .unwrap()
        .expect("free key");
    let mut samples = Vec::with_capacity(ROUNDS);
    for round in 0..ROUNDS {
        let next = (round + 1) % 2;
        let (e, k) = (sides[next].clone(), key.clone());
        let value = format!("side-{next}");
        let waiting = tokio::spawn(async move { e.campaign(&k, value, LEASE).await });
        while leader.candidates().await.unwrap().is_empty() {
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        let started = Instant::now();
        leader.hand_over(None).await.unwrap();
        let successor = waiting.await.unwrap().unwrap();
        samples.push(started.elapsed());
        leader = successor;
    }
    leader.release().await;
    for side in sides {
        side.cleanup().await;
    }
    samples
}

fn main() {
    let runtime = runtime();
    runtime.block_on(async {
        println!(
            "hand-over gap: hand_over() called -> the candidate's campaign() returns ({ROUNDS} rounds, lease {LEASE:?})"
        );
        report_head();
        let mem: DynTtlStorage = Arc::new(MemStorage::new());
        report(
            "storage-mem (watch)",
            case(mem.clone(), mem, "handover-candidate/mem").await,
        );
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("elections.redb");
        let a: DynTtlStorage = Arc::new(SharedRedbStorage::open(&path).await.unwrap());
        let b: DynTtlStorage = Arc::new(SharedRedbStorage::open(&path).await.unwrap());
        report(
            "storage-redb shared, two handles (watch)",
            case(a, b, "handover-candidate/redb").await,
        );
    });
}
