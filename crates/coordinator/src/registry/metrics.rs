//! Counters kept by a [`Registry`](super::Registry).

use std::sync::atomic::{AtomicU64, Ordering};

/// A snapshot of a registry's counters since it was created.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RegistryMetrics {
    /// Valkey round trips made by the registry (the hot-path cost; a cache
    /// hit on a destination costs zero unless the strategy uses load).
    pub valkey_round_trips: u64,
    /// Routes answered from the local cache.
    pub cache_hits: u64,
    /// Routes that had to read Valkey.
    pub cache_misses: u64,
    /// First-touch claims (`SADD` on an empty destination set).
    pub claims: u64,
    /// Orphaned destinations reassigned to a fresh member.
    pub reassignments: u64,
    /// Dead member ids removed from destination sets or `P:members`.
    pub pruned: u64,
    /// Calls a pod refused as a stale owner (ownership fencing), each
    /// followed by one re-resolve.
    pub stale_owner_refusals: u64,
}

#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) valkey_round_trips: AtomicU64,
    pub(crate) cache_hits: AtomicU64,
    pub(crate) cache_misses: AtomicU64,
    pub(crate) claims: AtomicU64,
    pub(crate) reassignments: AtomicU64,
    pub(crate) pruned: AtomicU64,
    pub(crate) stale_owner_refusals: AtomicU64,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    pub(crate) fn snapshot(&self) -> RegistryMetrics {
        let get = |c: &AtomicU64| c.load(Ordering::Relaxed);
        RegistryMetrics {
            valkey_round_trips: get(&self.valkey_round_trips),
            cache_hits: get(&self.cache_hits),
            cache_misses: get(&self.cache_misses),
            claims: get(&self.claims),
            reassignments: get(&self.reassignments),
            pruned: get(&self.pruned),
            stale_owner_refusals: get(&self.stale_owner_refusals),
        }
    }
}
