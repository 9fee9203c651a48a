//! How a leadership ends: through its handle, on a failing store, and when
//! everything that could end it is dropped. In-memory storage, paused time.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{sync::Arc, time::Duration};

use elections::{ArmReason, Elections, EndReason, Leadership, RecordingKiller};
use elections_testsuite::{Fault, FaultyStorage, Op};
use storage_mem::MemStorage;
use ttl_storage::{Key, TtlStorage};

const D: Duration = Duration::from_secs(20);

fn key() -> Key {
    Key::new("release-test").unwrap()
}

/// Elections on `storage` with a recording killer, and their leadership
/// of [`key`] as `a`.
async fn leading_on(
    storage: impl TtlStorage + 'static,
) -> (Elections, Arc<RecordingKiller>, Leadership) {
    let killer = RecordingKiller::new();
    let elections = Elections::with_killer(storage, killer.clone());
    let leadership = elections
        .acquire_leadership(&key(), "a", D)
        .await
        .unwrap()
        .unwrap();
    (elections, killer, leadership)
}

/// Release disarms the killer *before* its best-effort delete: a release
/// that starts just before the deadline, on a store whose deletes hang,
/// is never killed mid-delete.
#[tokio::test(start_paused = true)]
async fn release_disarms_the_killer_before_the_delete() {
    let faulty = FaultyStorage::new(Arc::new(MemStorage::new()));
    let (elections, killer, leadership) = leading_on(faulty.clone()).await;
    // Renewals stop working; the killer deadline is 0.8 d after the last
    // successful write. Release starts shortly before it.
    faulty.set_partitioned(true);
    faulty.inject(Op::Cad, Fault::Latency(D), 2);
    tokio::time::sleep(D.mul_f64(0.7)).await;
    leadership.release().await;
    tokio::time::sleep(D * 2).await;
    assert!(killer.kills().is_empty(), "{:?}", killer.kills());
    let events = killer.events();
    let last = events.last().unwrap();
    assert_eq!(last.reason, ArmReason::Disarmed);
    assert!(elections.held_keys().is_empty());
}

/// The last failed delete is not followed by a retry pause: on a store
/// that fails every call, release takes exactly one pause (d / 20).
#[tokio::test(start_paused = true)]
async fn release_on_a_failing_store_has_no_trailing_pause() {
    let faulty = FaultyStorage::new(Arc::new(MemStorage::new()));
    let (_elections, _killer, leadership) = leading_on(faulty.clone()).await;
    faulty.set_partitioned(true);
    let started = tokio::time::Instant::now();
    leadership.release().await;
    assert_eq!(started.elapsed(), D / 20);
    assert_eq!(faulty.calls(Op::Cad), 2);
}

/// A stale handle (of a leadership already released) never releases a
/// later leadership of the same key.
#[tokio::test(start_paused = true)]
async fn a_stale_handle_does_not_release_a_later_leadership() {
    let storage = MemStorage::new();
    let (elections, _killer, first) = leading_on(storage.clone()).await;
    let stale = first.clone();
    first.release().await;
    assert_eq!(stale.end_reason(), Some(EndReason::Released));
    let second = elections
        .acquire_leadership(&key(), "a", D)
        .await
        .unwrap()
        .unwrap();
    stale.release().await;
    assert!(second.is_active());
    assert_eq!(elections.held_keys(), vec![key()]);
    assert_eq!(
        storage.get(&key()).await.unwrap().as_deref(),
        Some(second.record_value())
    );
    second.release().await;
    assert_eq!(storage.get(&key()).await.unwrap(), None);
}

/// Dropping the last `Elections` while a handle lives changes nothing; once
/// the handle is gone too, the leadership ends as lost, the record is left
/// to expire, and the killer is disarmed: no surprise exit.
#[tokio::test(start_paused = true)]
async fn dropping_everything_abandons_the_leadership_without_a_kill() {
    let storage = MemStorage::new();
    let (elections, killer, leadership) = leading_on(storage.clone()).await;
    let token = leadership.cancellation_token();
    drop(elections);
    // The handle keeps the elections alive: renewals go on.
    tokio::time::sleep(D * 3).await;
    assert!(leadership.is_active());
    assert_eq!(
        storage.get(&key()).await.unwrap().as_deref(),
        Some(leadership.record_value())
    );
    drop(leadership);
    assert!(token.is_cancelled());
    // Not deleted: it expires by itself.
    assert!(storage.get(&key()).await.unwrap().is_some());
    tokio::time::sleep(D * 2).await;
    assert!(killer.kills().is_empty(), "{:?}", killer.kills());
    assert_eq!(storage.get(&key()).await.unwrap(), None);
}
