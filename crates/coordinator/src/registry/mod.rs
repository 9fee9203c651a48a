//! Routing: every decision about which member serves a destination.
//!
//! The coordinator side resolves destinations and locks to live members
//! (`resolve`: cache, singleflight, first touch, failover; `pick`: every
//! run of the strategy, re-resolving after a refused connection included);
//! `fan_out` is the pod side's choice of a peer for a saturated
//! destination. Nothing outside this module and [`crate::strategy`] runs a
//! strategy: the HTTP layer asks the [`Registry`] and forwards.

mod fan_out;
mod fleet;
mod metrics;
mod pick;
mod resolve;
mod singleflight;

use std::sync::Arc;

use fred::prelude::*;

pub use fleet::FleetLoad;
pub use metrics::RegistryMetrics;
pub use resolve::{Resolution, ResolveOptions, Route, RouteSource};

pub(crate) use fan_out::fan_out_peer;
pub(crate) use pick::Reroute;

use crate::address_policy::AddressPolicy;
use crate::cache::{CacheConfig, DestinationCache};
use crate::error::Result;
use crate::ids::{DestinationId, LockId, MemberId};
use crate::keys::{DEFAULT_PREFIX, KeySpace};
use crate::record::{LockRecord, MemberRecord};
use crate::strategy::DynStrategy;
use crate::valkey::{Scripts, replies};
use metrics::Counters;

/// What [`Registry::deregister_destination`] did.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Deregistration {
    /// The pod set is gone; `epoch` is the destination's epoch after it.
    Deleted {
        /// The epoch after the deletion (kept in Valkey).
        epoch: u64,
    },
    /// Live members are still in the set and were left there: a
    /// destination is never taken from a live member.
    LiveMembersLeft {
        /// The epoch after the call.
        epoch: u64,
        /// The live members left in the set.
        live: Vec<MemberId>,
    },
}

/// Settings of a [`Registry`].
#[derive(Clone, Debug)]
pub struct RegistryConfig {
    /// The key prefix `P` (default `coordinator`).
    pub prefix: String,
    /// The local pod-set cache; `None` turns it off (default 5 s / 10 000).
    pub cache: Option<CacheConfig>,
    /// Which member addresses may be forwarded to (default: any
    /// `http(s)://host[:port]`). It narrows what this registry picks and
    /// forwards to; a member outside it is never removed from a pod set
    /// (other coordinators, with other policies, may route to it).
    pub member_addresses: AddressPolicy,
}

impl Default for RegistryConfig {
    fn default() -> Self {
        Self {
            prefix: DEFAULT_PREFIX.to_owned(),
            cache: Some(CacheConfig::default()),
            member_addresses: AddressPolicy::default(),
        }
    }
}

/// Resolves destinations and locks to live members through Valkey.
///
/// Cheap to clone; clones share the cache, the strategy and the counters.
#[derive(Clone)]
pub struct Registry {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    keys: KeySpace,
    strategy: DynStrategy,
    cache: DestinationCache,
    counters: Counters,
    scripts: Scripts,
    policy: AddressPolicy,
    flights: singleflight::Flights<(DestinationId, ResolveOptions), Result<Resolution>>,
}

impl std::fmt::Debug for Registry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Registry")
            .field("prefix", &self.inner.keys.prefix())
            .field("strategy", &self.inner.strategy)
            .finish_non_exhaustive()
    }
}

impl Registry {
    /// A registry over a connected fred `client`, validating `config`.
    pub fn new(client: Client, config: RegistryConfig, strategy: DynStrategy) -> Result<Self> {
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                keys: KeySpace::new(config.prefix)?,
                strategy,
                cache: DestinationCache::new(config.cache)?,
                counters: Counters::default(),
                scripts: Scripts::new(),
                policy: config.member_addresses,
                flights: singleflight::Flights::default(),
            }),
        })
    }

    /// The key layout in use.
    pub fn keys(&self) -> &KeySpace {
        &self.inner.keys
    }

    /// The counters so far.
    pub fn metrics(&self) -> RegistryMetrics {
        self.inner.counters.snapshot()
    }

    /// Drops the cached pod set of `dest`, so the next route reads Valkey.
    pub fn evict(&self, dest: &DestinationId) {
        self.inner.cache.evict(dest);
    }

    fn round_trips(&self, n: u64) {
        Counters::add(&self.inner.counters.valkey_round_trips, n);
        crate::telemetry::round_trips(n);
    }

    /// Lists live members (those whose `P:member:<id>` record exists and has
    /// a valid address), sorted by id. Ids of dead members are removed from
    /// `P:members` in the same atomic step. One round trip.
    pub async fn list_live_members(&self) -> Result<Vec<MemberRecord>> {
        let i = &self.inner;
        let (raw, rt): (Vec<String>, u64) = i
            .scripts
            .live_members
            .run_counted(&i.client, i.keys.members(), vec![i.keys.member_prefix()])
            .await?;
        self.round_trips(rt);
        let (pruned, live) = replies::parse_live_members(raw, &i.policy)?;
        if pruned > 0 {
            tracing::debug!(pruned, "pruned dead ids from the members set");
            Counters::add(&i.counters.pruned, pruned as u64);
        }
        Ok(live)
    }

    /// Adds `member` to the pod set of `dest` (`SADD`) and drops the cached
    /// set. The destination's epoch grows if the set changed; the answer is
    /// the epoch after the call. One round trip.
    pub async fn add_pod_to_destination(
        &self,
        dest: &DestinationId,
        member: &MemberId,
    ) -> Result<u64> {
        let epoch = self.change_set(dest, Some(member), &[]).await?;
        self.inner.cache.evict(dest);
        Ok(epoch)
    }

    /// Binds `dest` to `member` the way first touch claims it: removes the
    /// members whose record is gone, then adds `member` only if no member
    /// is left (a live member is never removed, whatever this registry's
    /// address policy). The epoch after the binding, or `None` when a live
    /// member holds `dest`. Drops the cached set. One round trip.
    pub async fn bind_if_unowned(
        &self,
        dest: &DestinationId,
        member: &MemberId,
    ) -> Result<Option<u64>> {
        let i = &self.inner;
        let claimed = i.scripts.claim(&i.client, &i.keys, dest, member).await?;
        self.round_trips(claimed.round_trips);
        i.cache.evict(dest);
        Ok(claimed.won.then_some(claimed.epoch))
    }

    /// Whether `dest` has a non-empty pod set (live or not).
    pub async fn has_binding(&self, dest: &DestinationId) -> Result<bool> {
        let i = &self.inner;
        let n: i64 = i.client.scard(i.keys.destination(dest)).await?;
        self.round_trips(1);
        Ok(n > 0)
    }

    /// Deregisters `dest` without taking it from a live member: removes
    /// `leaver` (the pod that tore the destination down, with the epoch its
    /// `DELETE` was routed at) if the destination's epoch is still that one
    /// — a pod behind [`crate::http::pod::fenced`] has left by itself
    /// before answering, and once the set changed the leaver may have been
    /// bound again by a newer claim, which a late deregistration must not
    /// undo — and every member whose record is gone, and deletes the pod
    /// set when no live member is left.
    /// The epoch (`P:epoch:<id>`) is bumped on any change and kept, so a
    /// later binding is newer than any call routed before. Live members
    /// stay: another pod of a fanned-out destination, or a pod this
    /// coordinator's address policy rejects
    /// ([`Deregistration::LiveMembersLeft`]). Drops the cached set. One
    /// round trip.
    pub async fn deregister_destination(
        &self,
        dest: &DestinationId,
        leaver: Option<(&MemberId, u64)>,
    ) -> Result<Deregistration> {
        let i = &self.inner;
        let (epoch, live, rt) = i.scripts.unbind(&i.client, &i.keys, dest, leaver).await?;
        self.round_trips(rt);
        i.cache.evict(dest);
        if live.is_empty() {
            return Ok(Deregistration::Deleted { epoch });
        }
        let live = live
            .into_iter()
            .filter_map(|m| MemberId::new(m).ok())
            .collect();
        Ok(Deregistration::LiveMembersLeft { epoch, live })
    }

    /// Reads a lock record and its owner's member record in one round trip.
    /// `None` when the lock does not exist (never created, released or
    /// expired); `owner_record` is `None` when the owner is dead.
    pub async fn resolve_lock(&self, lock: &LockId) -> Result<Option<LockRecord>> {
        let i = &self.inner;
        let (raw, rt): (Vec<String>, u64) = i
            .scripts
            .lock
            .run_counted(&i.client, i.keys.lock(lock), vec![i.keys.member_prefix()])
            .await?;
        self.round_trips(rt);
        replies::parse_lock(lock, raw, &i.policy)
    }
}
