//! Elections record the documented metrics: the leader gauge, acquisitions,
//! renewal latency and slack, losses by cause and releases.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use elections::{Elections, RecordingKiller};
use elections_testsuite::{Fault, FaultyStorage, Op};
use metrics_snapshot::{DebuggingRecorder, Snapshot, Snapshotter};
use storage_mem::MemStorage;
use ttl_storage::{Key, Ttl, TtlStorage};

/// Runs `test` on a current-thread runtime with paused time, recording
/// into a recorder of its own, whose snapshots it is given.
fn measured(test: impl AsyncFnOnce(&Snapshotter)) {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .start_paused(true)
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || runtime.block_on(test(&snapshotter)));
}

#[test]
fn leadership_lifecycle_is_measured() {
    let key = Key::new("metrics-leader").unwrap();
    let k = ("key", "metrics-leader");
    measured(async |snapshotter| {
        let storage = MemStorage::new();
        let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
        let duration = Duration::from_secs(20);
        let leadership = elections
            .acquire_leadership(&key, "node-1", duration)
            .await
            .unwrap()
            .expect("free key");
        // A second contender is refused.
        let other = Elections::with_killer(storage.clone(), RecordingKiller::new());
        assert!(
            other
                .acquire_leadership(&key, "node-2", duration)
                .await
                .unwrap()
                .is_none()
        );

        // Two renewals (every d/4 = 5 s of paused time).
        tokio::time::sleep(Duration::from_secs(11)).await;
        let snap = Snapshot::take(snapshotter);
        assert_eq!(snap.gauge("elections_leader", &[k]), Some(1.0));
        assert_eq!(snap.counter("elections_acquisitions_total", &[k]), 1);
        assert_eq!(
            snap.counter(
                "elections_acquisition_attempts_total",
                &[k, ("outcome", "acquired")]
            ),
            1
        );
        assert_eq!(
            snap.counter(
                "elections_acquisition_attempts_total",
                &[k, ("outcome", "held_by_other")]
            ),
            1
        );
        assert_eq!(snap.samples("elections_renewal_seconds", &[k]).len(), 2);
        // The killer deadline after a success is 0.8 d = 16 s after the
        // write's start; a renewal 5 s later (instant in paused time)
        // leaves 11 s.
        assert_eq!(
            snap.samples("elections_renewal_slack_seconds", &[k]),
            vec![11.0, 11.0]
        );
        assert_eq!(snap.counter("elections_renewal_failures_total", &[k]), 0);

        // Someone else takes the record: the next renewal loses.
        let record = storage.get(&key).await.unwrap().unwrap();
        assert!(storage.compare_and_delete(&key, &record).await.unwrap());
        assert!(
            storage
                .insert_if_not_exists(&key, b"intruder", Ttl::from_secs(60).unwrap())
                .await
                .unwrap()
        );
        leadership.ended().await;
        let snap = Snapshot::take(snapshotter);
        assert_eq!(snap.gauge("elections_leader", &[k]), Some(0.0));
        assert_eq!(
            snap.counter("elections_losses_total", &[k, ("cause", "stolen")]),
            1
        );

        // The owner releases after the loss (disarming the killer).
        leadership.release().await;
        elections.cleanup().await;
        other.cleanup().await;
        let snap = Snapshot::take(snapshotter);
        assert_eq!(
            snap.counter("elections_releases_total", &[k, ("cause", "released")]),
            1
        );
        assert_eq!(snap.counter("elections_killer_fired_total", &[k]), 0);
    });
}

/// Renewals that keep failing: each failed attempt is counted by its kind,
/// and after the third the leadership is lost with cause `store_unavailable`.
#[test]
fn failed_renewals_are_counted_and_end_in_a_store_unavailable_loss() {
    let key = Key::new("metrics-failing").unwrap();
    let k = ("key", "metrics-failing");
    measured(async |snapshotter| {
        let storage = FaultyStorage::new(Arc::new(MemStorage::new()));
        let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
        let leadership = elections
            .acquire_leadership(&key, "node-1", Duration::from_secs(20))
            .await
            .unwrap()
            .expect("free key");
        Snapshot::take(snapshotter);
        // Every renewal from now on fails (there are only three).
        storage.inject(Op::Cas, Fault::Transient, 100);
        leadership.ended().await;
        let snap = Snapshot::take(snapshotter);
        assert_eq!(
            snap.counter(
                "elections_renewal_failures_total",
                &[k, ("kind", "transient")]
            ),
            3
        );
        assert_eq!(
            snap.counter(
                "elections_losses_total",
                &[k, ("cause", "store_unavailable")]
            ),
            1
        );
        assert_eq!(snap.gauge("elections_leader", &[k]), Some(0.0));
        leadership.release().await;
        elections.cleanup().await;
    });
}

/// Renewals that fall behind (each write takes 2.5 s, the round finishing
/// more than d/10 late) shed new acquisitions at once, with the typed error
/// and the metric, and without a store call; the held leadership keeps its
/// lease through a minute of slow writes (the killer never fires); once
/// the store is fast again, acquisitions are admitted after d/4.
#[test]
fn slow_renewals_shed_new_acquisitions_not_held_leases() {
    measured(async |snapshotter| {
        let faulty = FaultyStorage::new(Arc::new(MemStorage::new()));
        let killer = RecordingKiller::new();
        let elections = Elections::with_killer(faulty.clone(), killer.clone());
        let d = Duration::from_secs(20);
        let held = Key::new("held").unwrap();
        let leadership = elections
            .acquire_leadership(&held, "node-1", d)
            .await
            .unwrap()
            .expect("free key");

        faulty.set_latency(Some(Duration::from_millis(2500)));
        // The first slow round (due at d/4) finishes 2.5 s late.
        tokio::time::sleep(Duration::from_secs(8)).await;
        let inserts = faulty.calls(Op::Insert);
        let new = Key::new("new").unwrap();
        match elections.acquire_leadership(&new, "node-1", d).await {
            Err(elections::ElectionsError::Overloaded { lag, .. }) => {
                assert!(lag > d / 10, "{lag:?}");
            }
            other => panic!("expected Overloaded, got {other:?}"),
        }
        assert_eq!(faulty.calls(Op::Insert), inserts, "a shed attempt wrote");
        let snap = Snapshot::take(snapshotter);
        assert_eq!(snap.counter("elections_acquisitions_shed_total", &[]), 1);

        tokio::time::sleep(Duration::from_secs(60)).await;
        assert!(killer.kills().is_empty(), "{:?}", killer.kills());
        assert!(leadership.is_active(), "{:?}", leadership.end_reason());

        faulty.set_latency(None);
        // One fast round, then d/4 of shedding left at most.
        tokio::time::sleep(d / 4 + d / 4 + Duration::from_secs(1)).await;
        assert!(
            elections
                .acquire_leadership(&new, "node-1", d)
                .await
                .unwrap()
                .is_some()
        );
        assert!(killer.kills().is_empty());
        elections.cleanup().await;
    });
}
