//! Shared claims ([`elections::SharedClaim`]): taken with the lease,
//! refused when another group holds them, renewed with the lease under the
//! same killer, and never lapsing while a leader of the group may act.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::{Arc, Mutex},
    time::Duration,
};

use async_trait::async_trait;
use elections::{ArmReason, Elections, ElectionsError, EndReason, RecordingKiller, SharedClaim};
use storage_mem::MemStorage;
use tokio::time::Instant;
use ttl_storage::{Entry, Key, Result, StorageError, Ttl, TtlStorage, Watch, WatchUnsupported};

const D: Duration = Duration::from_secs(20);

fn claim(value: &str) -> SharedClaim {
    SharedClaim::new(Key::new("__test__/size").unwrap(), value)
}

/// MemStorage whose writes of one key fail while `failing` is set, and
/// which notes when each successful write of that key started.
#[derive(Clone)]
struct ClaimFaults {
    inner: MemStorage,
    key: Key,
    failing: Arc<Mutex<bool>>,
    written: Arc<Mutex<Vec<Instant>>>,
}

impl ClaimFaults {
    fn new(inner: MemStorage, key: &Key) -> Self {
        ClaimFaults {
            inner,
            key: key.clone(),
            failing: Arc::default(),
            written: Arc::default(),
        }
    }

    fn write<T>(&self, key: &Key, start: Instant, result: Result<T>) -> Result<T> {
        if *key == self.key && result.is_ok() {
            self.written.lock().unwrap().push(start);
        }
        result
    }

    fn check(&self, key: &Key) -> Result<()> {
        if *key == self.key && *self.failing.lock().unwrap() {
            return Err(StorageError::transient("injected"));
        }
        Ok(())
    }
}

#[async_trait]
impl TtlStorage for ClaimFaults {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        self.check(key)?;
        let start = Instant::now();
        let result = self.inner.insert_if_not_exists(key, value, ttl).await;
        self.write(key, start, result)
    }
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        self.check(key)?;
        let start = Instant::now();
        let result = self.inner.compare_and_swap(key, old, new, ttl).await;
        self.write(key, start, result)
    }
    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        self.check(key)?;
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

#[tokio::test(start_paused = true)]
async fn a_claim_held_by_another_group_refuses_the_lease_and_gives_it_back() {
    let storage = MemStorage::new();
    let one = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let k1 = Key::new("k/1").unwrap();
    let mut standby = one.stand_by(&k1, "one", D).unwrap().with_claim(claim("1"));
    let _leading = standby.try_acquire().await.unwrap().unwrap();
    assert_eq!(
        storage.get(claim("1").key()).await.unwrap().as_deref(),
        Some(&b"1"[..])
    );

    let two = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let k2 = Key::new("k/2").unwrap();
    let mut standby = two.stand_by(&k2, "two", D).unwrap().with_claim(claim("2"));
    let refused = standby.try_acquire().await.unwrap_err();
    assert!(
        matches!(&refused, ElectionsError::ClaimConflict { found, .. } if found == b"1"),
        "{refused:?}"
    );
    assert_eq!(
        storage.get(&k2).await.unwrap(),
        None,
        "k/2 was not given back"
    );
    assert!(two.held_keys().is_empty());
    one.cleanup().await;
}

/// The claim's writes fail: the leadership ends as a failed renewal does,
/// and the killer deadline never passes the claim's life.
#[tokio::test(start_paused = true)]
async fn a_claim_whose_writes_fail_ends_the_leadership_before_it_can_lapse() {
    let claim = claim("1");
    let storage = ClaimFaults::new(MemStorage::new(), claim.key());
    let killer = RecordingKiller::new();
    let elections = Elections::with_killer(storage.clone(), killer.clone());
    let key = Key::new("k/1").unwrap();
    let mut standby = elections
        .stand_by(&key, "one", D)
        .unwrap()
        .with_claim(claim.clone());
    let leading = standby.try_acquire().await.unwrap().unwrap();
    tokio::time::sleep(D).await;
    assert!(leading.is_active());
    *storage.failing.lock().unwrap() = true;
    let reason = tokio::time::timeout(D, leading.ended())
        .await
        .expect("ended");
    assert!(
        matches!(&reason, EndReason::StoreUnavailable { last_error, .. } if last_error.contains("claim")),
        "{reason:?}"
    );
    let last_write = *storage.written.lock().unwrap().last().unwrap();
    let deadline = killer
        .events()
        .iter()
        .rev()
        .find(|e| e.reason != ArmReason::Disarmed)
        .and_then(|e| e.deadline)
        .unwrap();
    assert!(
        deadline <= last_write + D * 4 / 5,
        "the killer deadline {:?} after the last claim write",
        deadline - last_write
    );
    // The claim is still live when the deadline passes.
    tokio::time::sleep_until(deadline).await;
    assert_eq!(
        storage.inner.get(claim.key()).await.unwrap().as_deref(),
        Some(&b"1"[..])
    );
    elections.release_leadership(&key).await;
}

/// While a release waits for slow work (longer than a lease), the claim is
/// renewed with the lease: it never lapses under work that still runs.
#[tokio::test(start_paused = true)]
async fn the_claim_is_renewed_while_the_work_stops() {
    let storage = MemStorage::new();
    let elections = Elections::with_killer(storage.clone(), RecordingKiller::new());
    let key = Key::new("k/1").unwrap();
    let mut standby = elections
        .stand_by(&key, "one", D)
        .unwrap()
        .with_claim(claim("1"));
    let leading = standby.try_acquire().await.unwrap().unwrap();
    let token = leading.cancellation_token();
    leading.spawn(async move {
        token.cancelled().await;
        tokio::time::sleep(D * 2).await;
    });
    let release = tokio::spawn(leading.clone().release());
    tokio::time::sleep(D * 3 / 2).await;
    assert!(!release.is_finished());
    assert_eq!(
        storage.get(claim("1").key()).await.unwrap().as_deref(),
        Some(&b"1"[..]),
        "the claim lapsed while the work still ran"
    );
    release.await.unwrap();
    // Released: the claim is left to expire (others of the group may hold it).
    tokio::time::sleep(D + Duration::from_secs(1)).await;
    assert_eq!(storage.get(claim("1").key()).await.unwrap(), None);
}
