//! The coordinator's local cache of destination pod sets.
//!
//! It holds a destination's whole *live pod set with addresses* (not one
//! picked pod), so a fanned-out destination keeps spreading calls while the
//! entry is warm: the strategy picks per call from the cached set.

use std::hash::BuildHasher;
use std::num::NonZeroUsize;
use std::sync::{Arc, RwLock, RwLockReadGuard, RwLockWriteGuard};
use std::time::{Duration, Instant};

use lru::LruCache;

use crate::error::{Error, Result};
use crate::ids::DestinationId;
use crate::record::MemberRecord;

/// Cache sizing. `RegistryConfig::cache = None` turns the cache off.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct CacheConfig {
    /// How long an entry is trusted (default 5 s).
    pub ttl: Duration,
    /// How many destinations are kept, least recently used evicted first
    /// (default 10 000).
    pub capacity: usize,
}

impl Default for CacheConfig {
    fn default() -> Self {
        Self {
            ttl: Duration::from_secs(5),
            capacity: 10_000,
        }
    }
}

impl CacheConfig {
    /// Checks the bounds: TTL in 1 ms..=1 h, capacity in 1..=10 000 000.
    pub fn validate(&self) -> Result<()> {
        if self.ttl < Duration::from_millis(1) || self.ttl > Duration::from_secs(3600) {
            return Err(Error::InvalidConfig(format!(
                "cache ttl must be within 1 ms..=1 h, got {:?}",
                self.ttl
            )));
        }
        if self.capacity == 0 || self.capacity > 10_000_000 {
            return Err(Error::InvalidConfig(format!(
                "cache capacity must be within 1..=10000000, got {}",
                self.capacity
            )));
        }
        Ok(())
    }
}

/// A destination's cached live pod set, sorted by member id.
pub(crate) type PodSet = Arc<[MemberRecord]>;

struct Entry {
    members: PodSet,
    /// The destination's assignment epoch the set was read at.
    epoch: u64,
    expires: Instant,
}

/// Caches of at least this capacity are split into [`SHARDS`] shards.
const SHARDED_FROM: usize = 1024;
/// Shards of a large cache: lookups of different destinations rarely
/// contend for one lock.
const SHARDS: usize = 16;

type Shard = RwLock<LruCache<DestinationId, Entry>>;

/// LRU + TTL map from destination to pod set; a no-op when disabled.
/// Large caches are sharded by destination (LRU order is then kept per
/// shard, each holding an equal part of the capacity).
pub(crate) struct DestinationCache {
    inner: Option<(Vec<Shard>, Duration)>,
    hasher: std::hash::RandomState,
}

impl DestinationCache {
    /// A cache with `config`, or a disabled one for `None`.
    pub(crate) fn new(config: Option<CacheConfig>) -> Result<Self> {
        let inner = match config {
            None => None,
            Some(c) => {
                c.validate()?;
                let shards = if c.capacity >= SHARDED_FROM {
                    SHARDS
                } else {
                    1
                };
                let cap = NonZeroUsize::new(c.capacity.div_ceil(shards))
                    .ok_or_else(|| Error::InvalidConfig("cache capacity is 0".into()))?;
                let shards = (0..shards)
                    .map(|_| RwLock::new(LruCache::new(cap)))
                    .collect();
                Some((shards, c.ttl))
            }
        };
        Ok(Self {
            inner,
            hasher: std::hash::RandomState::new(),
        })
    }

    /// The shard holding `dest`.
    fn shard<'a>(&self, shards: &'a [Shard], dest: &DestinationId) -> &'a Shard {
        let index = if shards.len() == 1 {
            0
        } else {
            (self.hasher.hash_one(dest) as usize) % shards.len()
        };
        &shards[index]
    }

    fn write<'a>(
        &self,
        shards: &'a [Shard],
        dest: &DestinationId,
    ) -> RwLockWriteGuard<'a, LruCache<DestinationId, Entry>> {
        self.shard(shards, dest)
            .write()
            .unwrap_or_else(|p| p.into_inner())
    }

    fn read<'a>(
        &self,
        shards: &'a [Shard],
        dest: &DestinationId,
    ) -> RwLockReadGuard<'a, LruCache<DestinationId, Entry>> {
        self.shard(shards, dest)
            .read()
            .unwrap_or_else(|p| p.into_inner())
    }

    /// The cached set of `dest` and its epoch.
    pub(crate) fn get(&self, dest: &DestinationId) -> Option<(PodSet, u64)> {
        self.get_at(dest, Instant::now())
    }

    /// A hit takes the shard's lock shared (readers never wait for each
    /// other); the entry's recency is refreshed only when the exclusive lock
    /// is free at once, so a hot destination costs no lock contention.
    pub(crate) fn get_at(&self, dest: &DestinationId, now: Instant) -> Option<(PodSet, u64)> {
        let (shards, _) = self.inner.as_ref()?;
        let fresh = {
            let cache = self.read(shards, dest);
            match cache.peek(dest) {
                Some(e) if e.expires > now => Some((e.members.clone(), e.epoch)),
                Some(_) => None,
                None => return None,
            }
        };
        match fresh {
            Some(members) => {
                if let Ok(mut cache) = self.shard(shards, dest).try_write() {
                    cache.promote(dest);
                }
                Some(members)
            }
            None => {
                let mut cache = self.write(shards, dest);
                if cache.peek(dest).is_some_and(|e| e.expires <= now) {
                    cache.pop(dest);
                }
                None
            }
        }
    }

    /// Caches `members` of `dest`, read at `epoch`.
    pub(crate) fn insert(&self, dest: DestinationId, members: PodSet, epoch: u64) {
        self.insert_at(dest, members, epoch, Instant::now());
    }

    pub(crate) fn insert_at(&self, dest: DestinationId, members: PodSet, epoch: u64, now: Instant) {
        if let Some((shards, ttl)) = &self.inner {
            let entry = Entry {
                members,
                epoch,
                expires: now + *ttl,
            };
            self.write(shards, &dest).put(dest, entry);
        }
    }

    pub(crate) fn evict(&self, dest: &DestinationId) {
        if let Some((shards, _)) = &self.inner {
            self.write(shards, dest).pop(dest);
        }
    }

    #[cfg(test)]
    fn len(&self) -> usize {
        self.inner
            .as_ref()
            .map(|(shards, _)| {
                shards
                    .iter()
                    .map(|s| s.read().unwrap_or_else(|p| p.into_inner()).len())
                    .sum()
            })
            .unwrap_or(0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_member;

    fn set(ids: &[&str]) -> PodSet {
        ids.iter().map(|id| test_member(id, 0)).collect()
    }

    fn dest(s: &str) -> DestinationId {
        DestinationId::new(s).unwrap()
    }

    fn cache(ttl_ms: u64, capacity: usize) -> DestinationCache {
        DestinationCache::new(Some(CacheConfig {
            ttl: Duration::from_millis(ttl_ms),
            capacity,
        }))
        .unwrap()
    }

    #[test]
    fn hit_returns_the_whole_set() {
        let c = cache(5000, 10);
        c.insert(dest("d"), set(&["a", "b"]), 3);
        let (got, epoch) = c.get(&dest("d")).unwrap();
        assert_eq!(got.len(), 2);
        assert_eq!(epoch, 3, "the epoch is kept with the set");
        assert!(c.get(&dest("other")).is_none());
    }

    #[test]
    fn entries_expire_after_the_ttl() {
        let c = cache(100, 10);
        let t0 = Instant::now();
        c.insert_at(dest("d"), set(&["a"]), 3, t0);
        assert!(
            c.get_at(&dest("d"), t0 + Duration::from_millis(99))
                .is_some()
        );
        assert!(
            c.get_at(&dest("d"), t0 + Duration::from_millis(100))
                .is_none()
        );
        assert_eq!(c.len(), 0, "expired entry is dropped");
    }

    #[test]
    fn least_recently_used_is_evicted_at_capacity() {
        let c = cache(5000, 2);
        c.insert(dest("a"), set(&["x"]), 3);
        c.insert(dest("b"), set(&["x"]), 3);
        assert!(c.get(&dest("a")).is_some()); // a is now most recent
        c.insert(dest("c"), set(&["x"]), 3);
        assert!(c.get(&dest("b")).is_none());
        assert!(c.get(&dest("a")).is_some());
        assert!(c.get(&dest("c")).is_some());
    }

    #[test]
    fn evict_and_disabled() {
        let c = cache(5000, 2);
        c.insert(dest("a"), set(&["x"]), 3);
        c.evict(&dest("a"));
        assert!(c.get(&dest("a")).is_none());

        let off = DestinationCache::new(None).unwrap();
        off.insert(dest("a"), set(&["x"]), 3);
        assert!(off.get(&dest("a")).is_none());
    }

    #[test]
    fn large_caches_are_sharded_and_keep_their_capacity() {
        let c = cache(5000, 4096);
        for i in 0..1000 {
            c.insert(dest(&format!("d{i}")), set(&["x"]), 3);
        }
        assert_eq!(c.len(), 1000);
        assert!((0..1000).all(|i| c.get(&dest(&format!("d{i}"))).is_some()));
    }

    #[test]
    fn invalid_configs_are_rejected() {
        for (ttl, cap) in [(0, 10), (5000, 0)] {
            let cfg = CacheConfig {
                ttl: Duration::from_millis(ttl),
                capacity: cap,
            };
            assert!(DestinationCache::new(Some(cfg)).is_err());
        }
    }
}
