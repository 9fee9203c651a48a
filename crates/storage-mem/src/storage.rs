//! [`MemStorage`]: the map, expiry, and the [`TtlStorage`] implementation.

use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use async_trait::async_trait;
use hashbrown::{HashMap, hash_map::EntryRef};
use tokio::{sync::watch, time::Instant};
use ttl_storage::{
    Change, Changes, ChangesUnsupported, Counted, CountedWrite, Entry, Key, Result, StorageError,
    TimeLeft, Ttl, TtlStorage, Watch, WatchUnsupported, changes::Feeds, check_value,
    counted::next_count,
};

use crate::MemConfig;

/// A concurrent in-memory [`TtlStorage`]. Cheap to clone; clones share data.
#[derive(Clone, Default)]
pub struct MemStorage {
    inner: Arc<Inner>,
    config: MemConfig,
}

/// The map, and the channel that tells waiters a record was deleted.
struct Inner {
    map: Mutex<Map>,
    /// Counts deletions; every [`TtlStorage::watch`] subscribes to it.
    deleted: watch::Sender<u64>,
    /// The followers of [`TtlStorage::changes`], always live; told under
    /// the map's lock, so in the map's order.
    feeds: Arc<Feeds>,
}

impl Default for Inner {
    fn default() -> Self {
        let feeds = Arc::new(Feeds::default());
        feeds.set_ready(true);
        Inner {
            map: Mutex::default(),
            deleted: watch::Sender::new(0),
            feeds,
        }
    }
}

#[derive(Default)]
struct Map {
    records: HashMap<Key, Record>,
    /// Map size right after the last full sweep.
    swept_len: usize,
}

struct Record {
    value: Vec<u8>,
    expires_at: Option<Instant>,
}

impl Record {
    fn new(value: &[u8], ttl: Ttl, now: Instant) -> Self {
        Record {
            value: value.to_vec(),
            expires_at: ttl.duration().map(|d| now + d),
        }
    }

    fn is_live(&self, now: Instant) -> bool {
        self.expires_at.is_none_or(|at| now < at)
    }
}

impl Map {
    /// The live record under `key`, dropping it first if it has expired.
    fn live(&mut self, key: &Key, now: Instant) -> Option<&mut Record> {
        // one lookup: a renewal is one per call, a million per 5 s at scale
        match self.records.entry_ref(key) {
            EntryRef::Occupied(record) if record.get().is_live(now) => Some(record.into_mut()),
            EntryRef::Occupied(record) => {
                record.remove();
                None
            }
            EntryRef::Vacant(_) => None,
        }
    }

    fn sweep_if_grown(&mut self, now: Instant) {
        if self.records.len() > 64 && self.records.len() > self.swept_len + self.swept_len / 2 {
            self.records.retain(|_, r| r.is_live(now));
            self.swept_len = self.records.len();
        }
    }
}

impl MemStorage {
    /// An empty storage with the default options (no record limit).
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty storage with `config`'s options.
    pub fn with_config(config: MemConfig) -> Self {
        MemStorage {
            inner: Arc::default(),
            config,
        }
    }

    /// The storage `config` describes, the way every driver opens one
    /// (`XStorage::connect(config)`); an in-memory store cannot fail to
    /// open.
    ///
    /// # Errors
    ///
    /// None: the error type is [`Infallible`](std::convert::Infallible).
    pub async fn connect(config: MemConfig) -> Result<Self, std::convert::Infallible> {
        Ok(Self::with_config(config))
    }

    /// The options this storage runs with.
    pub fn config(&self) -> &MemConfig {
        &self.config
    }

    /// Number of records held, live or not yet reclaimed (for diagnostics).
    pub fn len(&self) -> usize {
        self.lock().records.len()
    }

    /// True when no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Tells `key`'s followers its new value (called under the map's lock).
    fn written(&self, key: &Key, value: &[u8], count: Option<u64>) {
        if self.inner.feeds.is_followed(key.as_str()) {
            let value = value.to_vec();
            self.inner
                .feeds
                .publish(key.as_str(), Change::Written { value, count });
        }
    }

    fn lock(&self) -> MutexGuard<'_, Map> {
        // A panic while holding the lock cannot leave a record half-written
        // (every mutation is a single map call), so poisoning is harmless.
        self.inner
            .map
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }
}

#[async_trait]
impl TtlStorage for MemStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        let now = Instant::now();
        let mut map = self.lock();
        if map.live(key, now).is_some() {
            return Ok(false);
        }
        if let Some(max) = self.config.max_records() {
            if map.records.len() >= max {
                // Reclaim the expired ones before refusing.
                map.records.retain(|_, r| r.is_live(now));
                map.swept_len = map.records.len();
            }
            if map.records.len() >= max {
                return Err(StorageError::permanent(format!(
                    "the in-memory storage holds its maximum of {max} records; nothing was written"
                )));
            }
        }
        map.records
            .insert(key.clone(), Record::new(value, ttl, now));
        map.sweep_if_grown(now);
        self.written(key, value, None);
        Ok(true)
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        let now = Instant::now();
        let mut map = self.lock();
        match map.live(key, now) {
            Some(record) if record.value == old => {
                if old == new {
                    // a renewal: the value stays, only the expiry moves
                    record.expires_at = ttl.duration().map(|d| now + d);
                } else {
                    *record = Record::new(new, ttl, now);
                    self.written(key, new, None);
                }
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        let now = Instant::now();
        let mut map = self.lock();
        match map.live(key, now) {
            Some(record) if record.value == value => {
                map.records.remove(key);
                self.inner.feeds.publish(key.as_str(), Change::Deleted);
                drop(map);
                self.inner.deleted.send_modify(|n| *n = n.wrapping_add(1));
                Ok(true)
            }
            _ => Ok(false),
        }
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        let now = Instant::now();
        let mut map = self.lock();
        Ok(map.live(key, now).map(|r| r.value.clone()))
    }

    /// Under the one lock: the record's condition, the counter's advance,
    /// both writes.
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        if let Some(old) = write.expected {
            check_value(old)?;
        }
        check_value(write.value)?;
        let now = Instant::now();
        let mut map = self.lock();
        let holds = map.live(write.key, now).map(|r| r.value.clone());
        let matches = match (holds.as_deref(), write.expected) {
            (None, None) => true,
            (Some(value), Some(expected)) => value == expected,
            _ => false,
        };
        if !matches {
            return Ok(Counted::Refused);
        }
        let current = map.live(write.counter, now).map(|r| r.value.clone());
        let next = next_count(write.counter, current.as_deref(), write.floor, write.max)?;
        if let Some(max) = self.config.max_records() {
            let new = usize::from(holds.is_none()) + usize::from(current.is_none());
            if map.records.len() + new > max {
                map.records.retain(|_, r| r.is_live(now));
                map.swept_len = map.records.len();
            }
            if map.records.len() + new > max {
                return Err(StorageError::permanent(format!(
                    "the in-memory storage holds its maximum of {max} records; nothing was written"
                )));
            }
        }
        map.records.insert(
            write.counter.clone(),
            Record::new(next.to_string().as_bytes(), Ttl::NEVER, now),
        );
        map.records
            .insert(write.key.clone(), Record::new(write.value, write.ttl, now));
        map.sweep_if_grown(now);
        if write.expected != Some(write.value) {
            self.written(write.key, write.value, Some(next));
        }
        Ok(Counted::Written(next))
    }

    /// The time left is exact on tokio's clock.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        let now = Instant::now();
        let mut map = self.lock();
        Ok(map.live(key, now).map(|record| Entry {
            value: record.value.clone(),
            time_left: match record.expires_at {
                None => TimeLeft::Never,
                Some(at) => TimeLeft::About(at.saturating_duration_since(now)),
            },
        }))
    }

    /// Completes on any delete, at the record's expiry (tokio's clock), or at
    /// once when the key holds no live record.
    /// Every value written and every delete, in the map's order; expiry is
    /// not reported.
    fn changes(&self, key: &Key, _counter: Option<&Key>) -> Result<Changes, ChangesUnsupported> {
        Ok(self.inner.feeds.subscribe(key.as_str().to_owned()))
    }

    fn watch(&self, key: &Key) -> Result<Watch, WatchUnsupported> {
        let now = Instant::now();
        // Subscribed under the map lock: a delete after this point is seen.
        let mut map = self.lock();
        let mut deleted = self.inner.deleted.subscribe();
        let expires_at = match map.live(key, now) {
            None => return Ok(Box::pin(async {})),
            Some(record) => record.expires_at,
        };
        drop(map);
        Ok(Box::pin(async move {
            let expiry = async {
                match expires_at {
                    Some(at) => tokio::time::sleep_until(at).await,
                    None => std::future::pending().await,
                }
            };
            tokio::select! {
                // An error means the storage is gone: wake the waiter too.
                _ = deleted.changed() => {}
                () = expiry => {}
            }
        }))
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use ttl_storage::ErrorKind;

    use super::*;

    #[tokio::test(start_paused = true)]
    async fn expired_records_are_reclaimed() {
        let storage = MemStorage::new();
        let ttl = Ttl::from_secs(1).unwrap();
        for i in 0..1000 {
            let key = Key::new(format!("k{i}")).unwrap();
            assert!(storage.insert_if_not_exists(&key, b"v", ttl).await.unwrap());
            if i % 100 == 99 {
                tokio::time::advance(Duration::from_secs(2)).await;
            }
        }
        assert!(storage.len() < 300, "held {} records", storage.len());
    }

    #[tokio::test(start_paused = true)]
    async fn watch_wakes_on_delete_expiry_and_absence() {
        let storage = MemStorage::new();
        let key = Key::new("k").unwrap();
        // Absent: at once.
        storage.watch(&key).unwrap().await;
        // Deleted: the delete wakes the waiter long before the expiry.
        assert!(
            storage
                .insert_if_not_exists(&key, b"v", Ttl::from_secs(60).unwrap())
                .await
                .unwrap()
        );
        let start = Instant::now();
        let watch = storage.watch(&key).unwrap();
        let deleter = storage.clone();
        let delete_key = key.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_secs(1)).await;
            deleter.compare_and_delete(&delete_key, b"v").await.unwrap();
        });
        watch.await;
        assert_eq!(start.elapsed(), Duration::from_secs(1));
        // Expired: exactly at the expiry.
        let ttl = Ttl::from_secs(3).unwrap();
        assert!(storage.insert_if_not_exists(&key, b"w", ttl).await.unwrap());
        let start = Instant::now();
        storage.watch(&key).unwrap().await;
        assert_eq!(start.elapsed(), Duration::from_secs(3));
        assert!(storage.get(&key).await.unwrap().is_none());
    }

    #[tokio::test(start_paused = true)]
    async fn the_record_limit_refuses_new_keys_but_reclaims_expired_ones() {
        let storage = MemStorage::with_config(MemConfig::new().with_max_records(2).unwrap());
        let short = Ttl::from_secs(1).unwrap();
        let long = Ttl::from_secs(60).unwrap();
        let [a, b, c] = ["a", "b", "c"].map(|k| Key::new(k).unwrap());
        assert!(storage.insert_if_not_exists(&a, b"1", long).await.unwrap());
        assert!(storage.insert_if_not_exists(&b, b"2", short).await.unwrap());
        let full = storage
            .insert_if_not_exists(&c, b"3", long)
            .await
            .unwrap_err();
        assert_eq!(full.kind(), ErrorKind::Permanent);
        assert!(storage.get(&c).await.unwrap().is_none(), "nothing written");
        // Existing keys still swap.
        assert!(
            storage
                .compare_and_swap(&a, b"1", b"1b", long)
                .await
                .unwrap()
        );
        tokio::time::advance(Duration::from_secs(2)).await;
        // b expired: its place is free.
        assert!(storage.insert_if_not_exists(&c, b"3", long).await.unwrap());
    }

    #[tokio::test(start_paused = true)]
    async fn expiry_is_exact() {
        let storage = MemStorage::new();
        let key = Key::new("k").unwrap();
        let ttl = Ttl::from_secs(3).unwrap();
        assert!(storage.insert_if_not_exists(&key, b"v", ttl).await.unwrap());
        tokio::time::advance(Duration::from_millis(2999)).await;
        assert!(storage.get(&key).await.unwrap().is_some());
        tokio::time::advance(Duration::from_millis(1)).await;
        assert!(storage.get(&key).await.unwrap().is_none());
    }
}
