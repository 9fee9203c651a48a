//! Priorities in the library: a free key goes to the highest priority
//! waiting (a lower one leaves it alone, a crashed higher one only until
//! its record expires), a hand-over to "anyone" goes to the highest
//! priority before the longest-waiting, and a leader's [`Preemption`] names
//! a higher-priority candidate after the hold-down, never an equal one; a
//! malformed priority in the store counts as 0.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use elections::{Elections, Preemption, RecordingKiller, candidates::CANDIDATE_PREFIX};
use storage_mem::MemStorage;
use ttl_storage::{Key, Ttl, TtlStorage};

const D: Duration = Duration::from_secs(20);

fn node(storage: &MemStorage) -> Elections {
    Elections::with_killer(storage.clone(), RecordingKiller::new())
}

#[tokio::test(start_paused = true)]
async fn a_free_key_goes_to_the_highest_priority_waiting() {
    let storage = MemStorage::new();
    let key = Key::new("prio").unwrap();
    let held = node(&storage)
        .acquire_leadership(&key, "holder", D)
        .await
        .unwrap()
        .unwrap();
    let (low, high) = (node(&storage), node(&storage));
    let mut low = low.stand_by(&key, "low", D).unwrap();
    let mut high = high.stand_by(&key, "high", D).unwrap().with_priority(5);
    assert!(low.try_acquire().await.unwrap().is_none());
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(high.try_acquire().await.unwrap().is_none());
    // Highest first, whoever waited longer.
    let listed = held.candidates().await.unwrap();
    let order: Vec<_> = listed
        .iter()
        .map(|c| (c.value.clone(), c.priority))
        .collect();
    assert_eq!(order, [(b"high".to_vec(), 5), (b"low".to_vec(), 0)]);

    held.release().await;
    // The lower one leaves the free key to the higher one.
    assert!(low.try_acquire().await.unwrap().is_none());
    let leading = high.try_acquire().await.unwrap().expect("the key is free");
    assert!(leading.record_value().starts_with(b"high#"));
}

#[tokio::test(start_paused = true)]
async fn a_crashed_higher_priority_candidate_holds_a_free_key_only_until_its_record_expires() {
    let storage = MemStorage::new();
    let key = Key::new("crash").unwrap();
    let mut high = node(&storage)
        .stand_by(&key, "high", D)
        .unwrap()
        .with_priority(5);
    let held = node(&storage)
        .acquire_leadership(&key, "holder", D)
        .await
        .unwrap()
        .unwrap();
    assert!(high.try_acquire().await.unwrap().is_none());
    // "Crashed": never tries again, never withdraws.
    std::mem::forget(high);
    held.release().await;
    let mut low = node(&storage).stand_by(&key, "low", D).unwrap();
    assert!(low.try_acquire().await.unwrap().is_none());
    // Candidate records live half a lease.
    tokio::time::sleep(D / 2 + Duration::from_secs(1)).await;
    assert!(low.try_acquire().await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn hand_over_to_anyone_prefers_the_priority_and_preemption_waits_the_hold_down() {
    let storage = MemStorage::new();
    let key = Key::new("anyone").unwrap();
    let held = node(&storage)
        .acquire_leadership(&key, "holder", D)
        .await
        .unwrap()
        .unwrap();
    let mut preemption = Preemption::new(0, 2 * D, 2 * D);
    let mut equal = node(&storage).stand_by(&key, "equal", D).unwrap();
    let mut low = node(&storage)
        .stand_by(&key, "low", D)
        .unwrap()
        .with_priority(-1);
    assert!(equal.try_acquire().await.unwrap().is_none());
    assert!(low.try_acquire().await.unwrap().is_none());
    for _ in 0..10 {
        tokio::time::sleep(D / 4).await;
        assert!(equal.try_acquire().await.unwrap().is_none());
        assert!(low.try_acquire().await.unwrap().is_none());
        assert_eq!(held.preemption_due(&mut preemption).await.unwrap(), None);
    }
    let mut high = node(&storage)
        .stand_by(&key, "high", D)
        .unwrap()
        .with_priority(1);
    let stood = tokio::time::Instant::now();
    let mut due = None;
    for _ in 0..10 {
        assert!(high.try_acquire().await.unwrap().is_none());
        assert!(equal.try_acquire().await.unwrap().is_none());
        due = held.preemption_due(&mut preemption).await.unwrap();
        if due.is_some() {
            break;
        }
        tokio::time::sleep(D / 4).await;
    }
    let due = due.expect("due after the hold-down");
    assert!(stood.elapsed() >= 2 * D, "due after {:?}", stood.elapsed());
    assert_eq!(due.value, b"high");
    let to = held.hand_over(None).await.unwrap();
    assert_eq!(to.id, *high.id());
    assert!(high.try_acquire().await.unwrap().is_some());
}

#[tokio::test(start_paused = true)]
async fn a_malformed_priority_counts_as_zero() {
    let storage = MemStorage::new();
    let key = Key::new("bad").unwrap();
    let slot = Key::new(format!("{CANDIDATE_PREFIX}00/{key}")).unwrap();
    let ttl = Ttl::from_secs(60).unwrap();
    storage
        .insert_if_not_exists(&slot, b"cand2 5 0123456789abcdef00000001 9z9 forged", ttl)
        .await
        .unwrap();
    let status = elections::inspect(&storage, &key).await.unwrap();
    assert_eq!(status.candidates.len(), 1);
    assert_eq!(status.candidates[0].priority, 0);
    assert_eq!(status.candidates[0].value, b"forged");
    // It does not outrank a priority-0 standby on a free key.
    let mut mine = node(&storage).stand_by(&key, "mine", D).unwrap();
    assert!(mine.try_acquire().await.unwrap().is_some());
}
