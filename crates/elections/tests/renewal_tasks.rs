//! The shared renewal tasks (`renewal/batch.rs`) and the killer clock
//! (`killer/clock.rs`): many leaderships renewed by a few tasks, each on
//! its schedule; a leadership whose round fails is finished apart and
//! comes back; a release during an attempt in flight returns only once
//! it is over, and nothing renews after it.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    collections::HashMap,
    sync::{
        Arc, Mutex,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use elections::{Elections, RecordingKiller};
use storage_mem::MemStorage;
use tokio::{sync::Notify, time::Instant};
use ttl_storage::{Entry, Key, Result, StorageError, Ttl, TtlStorage, Watch, WatchUnsupported};

const D: Duration = Duration::from_secs(20);

/// MemStorage that notes the start of every compare-and-swap by key, can
/// hold every one back until told (`hold`), and can fail the next ones of
/// one key (`fail`).
#[derive(Clone, Default)]
struct Observed {
    inner: MemStorage,
    swaps: Arc<Mutex<HashMap<Key, Vec<Instant>>>>,
    hold: Arc<AtomicBool>,
    released: Arc<Notify>,
    fail: Arc<Mutex<Option<(Key, u32)>>>,
}

impl Observed {
    fn swaps_of(&self, key: &Key) -> Vec<Instant> {
        self.swaps
            .lock()
            .unwrap()
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
}

#[async_trait]
impl TtlStorage for Observed {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        self.inner.insert_if_not_exists(key, value, ttl).await
    }
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        self.swaps
            .lock()
            .unwrap()
            .entry(key.clone())
            .or_default()
            .push(Instant::now());
        if self.hold.load(Ordering::SeqCst) {
            self.released.notified().await;
        }
        {
            let mut fail = self.fail.lock().unwrap();
            if let Some((failing, left)) = fail.as_mut()
                && failing == key
                && *left > 0
            {
                *left -= 1;
                return Err(StorageError::transient("injected"));
            }
        }
        self.inner.compare_and_swap(key, old, new, ttl).await
    }
    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        self.inner.compare_and_delete(key, value).await
    }
    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.inner.get(key).await
    }
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        self.inner.get_entry(key).await
    }
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        self.inner.watch(key)
    }
}

/// Two hundred leaderships acquired at different times are each renewed on
/// their own schedule (every d/4 after the write before, at most one tick
/// late); one whose renewal fails twice is retried d/20 apart and then
/// renewed with the others again; none is lost, no killer fires.
#[tokio::test(start_paused = true)]
async fn every_leadership_is_renewed_on_its_own_schedule() {
    let storage = Observed::default();
    let killer = RecordingKiller::new();
    let e = Elections::with_killer(storage.clone(), killer.clone());
    let mut held = Vec::new();
    for i in 0..200 {
        let key = Key::new(format!("k/{i}")).unwrap();
        held.push((
            key.clone(),
            e.acquire_leadership(&key, "me", D).await.unwrap().unwrap(),
        ));
        tokio::time::sleep(Duration::from_millis(37)).await;
    }
    let failing = held[17].0.clone();
    *storage.fail.lock().unwrap() = Some((failing.clone(), 2));
    tokio::time::sleep(D * 3).await;

    for (key, leadership) in &held {
        assert!(
            leadership.is_active(),
            "{key} lost: {:?}",
            leadership.end_reason()
        );
        let swaps = storage.swaps_of(key);
        // the confirming write, then the renewals
        let gaps: Vec<Duration> = swaps.windows(2).map(|w| w[1] - w[0]).collect();
        if *key == failing {
            // two failed attempts d/20 apart, then back to every d/4
            assert!(gaps.contains(&(D / 20)), "{key}: {gaps:?}");
            assert!(
                gaps.iter().filter(|gap| **gap == D / 20).count() == 2,
                "{key}: {gaps:?}"
            );
            assert!(
                swaps.len() >= 11 + 2,
                "{key} renewed {} times in 3 d",
                swaps.len()
            );
            continue;
        }
        assert!(
            swaps.len() >= 11,
            "{key} renewed {} times in 3 d",
            swaps.len()
        );
        for gap in &gaps[1..] {
            assert!(
                *gap >= D / 4 && *gap <= D / 4 + Duration::from_millis(10),
                "{key}: a round {gap:?} after the one before"
            );
        }
    }
    assert!(killer.kills().is_empty(), "{:?}", killer.kills());
    e.cleanup().await;
    assert_eq!(e.background_tasks(), 0);
}

/// A release while a renewal's write is in flight returns once that
/// attempt is over; the record is deleted, the killer disarmed, and no
/// write of the key starts after the release returns. The same for a
/// release between two rounds (the leadership waits in its shard).
#[tokio::test(start_paused = true)]
async fn nothing_renews_after_a_release_that_met_an_attempt_in_flight() {
    let storage = Observed::default();
    let killer = RecordingKiller::new();
    let e = Elections::with_killer(storage.clone(), killer.clone());
    let key = Key::new("k").unwrap();
    let other = Key::new("other").unwrap();
    let leadership = e.acquire_leadership(&key, "me", D).await.unwrap().unwrap();
    let _other = e
        .acquire_leadership(&other, "me", D)
        .await
        .unwrap()
        .unwrap();
    let between = Key::new("between").unwrap();
    let waiting = e
        .acquire_leadership(&between, "me", D)
        .await
        .unwrap()
        .unwrap();
    tokio::time::sleep(D / 8).await;
    waiting.release().await;
    let between_released = Instant::now();
    storage.hold.store(true, Ordering::SeqCst);
    tokio::time::sleep(D / 8 + Duration::from_millis(20)).await;
    assert_eq!(
        storage.swaps_of(&key).len(),
        2,
        "the confirming write, then the renewal in flight"
    );

    leadership.release().await;
    let released_at = Instant::now();
    assert_eq!(storage.inner.get(&key).await.unwrap(), None);
    storage.hold.store(false, Ordering::SeqCst);
    storage.released.notify_waiters();
    tokio::time::sleep(D * 2).await;

    let late: Vec<Instant> = storage
        .swaps_of(&key)
        .into_iter()
        .filter(|at| *at >= released_at)
        .collect();
    assert!(late.is_empty(), "writes after the release: {late:?}");
    let late: Vec<Instant> = storage
        .swaps_of(&between)
        .into_iter()
        .filter(|at| *at >= between_released)
        .collect();
    assert!(
        late.is_empty(),
        "writes after the release between rounds: {late:?}"
    );
    assert!(killer.kills().is_empty(), "{:?}", killer.kills());
    assert!(
        storage.swaps_of(&other).len() >= 8,
        "the other leadership stopped being renewed"
    );
    e.cleanup().await;
    assert_eq!(e.background_tasks(), 0);
}
