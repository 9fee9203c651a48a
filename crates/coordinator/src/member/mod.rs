//! The resource pod side, all of it: membership and heartbeat, the
//! destinations it owns and the ownership fence (`ownership`), locks,
//! saturation fan-out, cancellation of in-flight calls (`cancel`), and the
//! HTTP glue a pod mounts (`pod`: the fence and cancel middleware and the
//! cancel endpoint, public as [`crate::http::pod`]).

pub(crate) mod cancel;
mod config;
mod heartbeat;
mod locks;
mod ownership;
pub mod pod;
mod saturation;

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};

use fred::prelude::*;

pub use config::{MemberConfig, SaturationConfig};
pub use heartbeat::HeartbeatTask;
pub use ownership::{LEASE_FRACTION, OwnershipRefusal};
pub use saturation::DestinationPermit;

use crate::address::MemberAddress;
use crate::address_policy::AddressPolicy;
use crate::error::Result;
use crate::ids::{DestinationId, LockId, MemberId};
use crate::keys::{KeySpace, fields};
use crate::record::MemberRecord;
use crate::valkey::{Scripts, replies};
use cancel::CancelRegistry;
use locks::HeldLock;
use saturation::Limiter;

/// Where a pod's `load` comes from. Any `Fn() -> i64` works.
pub trait LoadSource: Send + Sync {
    /// The current load; grows with how stretched the pod is.
    fn load(&self) -> i64;
}

impl<F: Fn() -> i64 + Send + Sync> LoadSource for F {
    fn load(&self) -> i64 {
        self()
    }
}

/// A resource pod's membership in the fleet.
///
/// Cheap to clone; clones share state. See the crate docs for an example.
#[derive(Clone)]
pub struct Member {
    inner: Arc<Inner>,
}

struct Inner {
    client: Client,
    keys: KeySpace,
    config: MemberConfig,
    load: Option<Arc<dyn LoadSource>>,
    locks: Mutex<HashMap<LockId, HeldLock>>,
    /// Serialises heartbeats with lock writes, so a heartbeat never
    /// re-creates a lock that was just unregistered.
    write_gate: tokio::sync::Mutex<()>,
    limiter: Limiter,
    fanned: Mutex<HashSet<(DestinationId, MemberId)>>,
    cancels: CancelRegistry,
    scripts: Scripts,
    fence: ownership::Fence,
    /// Counts successful heartbeats, for work renewed with them
    /// ([`Member::heartbeats`]).
    beats: tokio::sync::watch::Sender<u64>,
}

impl std::fmt::Debug for Member {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Member")
            .field("id", &self.inner.config.id)
            .field("address", &self.inner.config.address)
            .finish_non_exhaustive()
    }
}

impl Member {
    /// A member over a connected fred `client`. Its load is the number of
    /// calls holding or waiting for a [`DestinationPermit`].
    pub fn new(client: Client, config: MemberConfig) -> Result<Self> {
        Self::build(client, config, None)
    }

    /// A member whose published load comes from `load`.
    pub fn with_load_source(
        client: Client,
        config: MemberConfig,
        load: Arc<dyn LoadSource>,
    ) -> Result<Self> {
        Self::build(client, config, Some(load))
    }

    fn build(
        client: Client,
        config: MemberConfig,
        load: Option<Arc<dyn LoadSource>>,
    ) -> Result<Self> {
        config.validate()?;
        Ok(Self {
            inner: Arc::new(Inner {
                client,
                keys: KeySpace::new(config.prefix.clone())?,
                limiter: Limiter::new(config.saturation),
                fence: ownership::Fence::new(config.ttl, config.fence_capacity),
                config,
                load,
                locks: Mutex::default(),
                write_gate: tokio::sync::Mutex::new(()),
                fanned: Mutex::default(),
                cancels: CancelRegistry::new(),
                scripts: Scripts::new(),
                beats: tokio::sync::watch::Sender::new(0),
            }),
        })
    }

    /// This pod's id.
    pub fn id(&self) -> &MemberId {
        &self.inner.config.id
    }

    /// This pod's address.
    pub fn address(&self) -> &MemberAddress {
        &self.inner.config.address
    }

    /// The settings.
    pub fn config(&self) -> &MemberConfig {
        &self.inner.config
    }

    /// The key layout in use.
    pub fn keys(&self) -> &KeySpace {
        &self.inner.keys
    }

    /// The registry of this pod's in-flight calls, for cancellation.
    pub fn cancellations(&self) -> &CancelRegistry {
        &self.inner.cancels
    }

    /// The load published on the next heartbeat.
    pub fn load(&self) -> i64 {
        match &self.inner.load {
            Some(source) => source.load(),
            None => self.inner.limiter.load(),
        }
    }

    /// Registers the pod: same as [`Member::heartbeat`].
    pub async fn register(&self) -> Result<()> {
        self.heartbeat().await
    }

    /// Writes `address` and `load`, resets the record's TTL, adds the id to
    /// `P:members` and rewrites every held lock with a fresh TTL, all in one
    /// `MULTI`. An expired record is thus re-created, and a pod that missed
    /// heartbeats comes back without a restart. Success renews the pod's
    /// lease on routed calls from the moment this call started
    /// ([`Member::lease_deadline`]); after a lapse (the lease had run out),
    /// only once the epochs of the destinations the pod remembers were
    /// re-read, those it still belongs to bumped (a second round trip).
    /// A leave that failed ([`Member::remove_from_destination`]) is tried
    /// again afterwards.
    pub async fn heartbeat(&self) -> Result<()> {
        let started = std::time::Instant::now();
        let i = &self.inner;
        let _gate = i.write_gate.lock().await;
        let locks: Vec<(LockId, HeldLock)> = i
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        let member_key = i.keys.member(&i.config.id);
        let trx = i.client.multi();
        let _: () = trx
            .hset(
                &member_key,
                vec![
                    (fields::ADDRESS, i.config.address.as_str().to_owned()),
                    (fields::LOAD, self.load().to_string()),
                ],
            )
            .await?;
        let _: () = trx.pexpire(&member_key, millis(i.config.ttl), None).await?;
        let _: () = trx.sadd(i.keys.members(), i.config.id.as_str()).await?;
        for (id, lock) in &locks {
            let key = i.keys.lock(id);
            let _: () = trx.hset(&key, lock.fields(&i.config.id)).await?;
            let _: () = trx.pexpire(&key, millis(i.config.lock_ttl), None).await?;
        }
        let _: Value = trx.exec(true).await?;
        if i.fence.lapsed(std::time::Instant::now()) {
            // the destinations may have moved while the lease was out:
            // route epochs from before the lapse must not be admitted
            let known = i.fence.known();
            let epochs = i
                .scripts
                .reaffirm(&i.client, &i.keys, &known, &i.config.id)
                .await?;
            for (dest, (epoch, member)) in known.iter().zip(epochs) {
                i.fence.learned(dest, epoch, member);
            }
            tracing::info!(member = %i.config.id, destinations = known.len(), "lease back after a lapse: epochs re-read");
        }
        i.fence.renewed(started);
        i.beats.send_modify(|n| *n = n.wrapping_add(1));
        for dest in i.fence.leaving() {
            // a leave that failed: the destination stays refused until it
            // is in Valkey
            match self.leave(&dest).await {
                Ok(epoch) => {
                    tracing::info!(member = %i.config.id, destination = %dest, epoch, "left the destination (retried)");
                }
                Err(err) => {
                    tracing::warn!(member = %i.config.id, destination = %dest, %err, "leaving the destination failed again");
                }
            }
        }
        Ok(())
    }

    /// A receiver that changes after every successful [`Member::heartbeat`]
    /// (its value counts them). Records that live as long as the member
    /// (the cluster events' subscription entries, `coordinator-events`)
    /// are renewed when it changes: they get the member's TTL and lapse
    /// with it, and a slow renewal never delays the heartbeat.
    pub fn heartbeats(&self) -> tokio::sync::watch::Receiver<u64> {
        self.inner.beats.subscribe()
    }

    /// Removes the member record, the id from `P:members` and every held
    /// lock record. Stop the [`HeartbeatTask`] first, or it re-registers.
    /// Destination sets still naming this pod are cleaned lazily by
    /// coordinators (they drop dead members on the next lookup).
    pub async fn deregister(&self) -> Result<()> {
        let i = &self.inner;
        let _gate = i.write_gate.lock().await;
        i.fence.revoked();
        let locks: Vec<LockId> = i
            .locks
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .drain()
            .map(|(k, _)| k)
            .collect();
        let trx = i.client.multi();
        let _: () = trx.del(i.keys.member(&i.config.id)).await?;
        let _: () = trx.srem(i.keys.members(), i.config.id.as_str()).await?;
        for id in &locks {
            let _: () = trx.del(i.keys.lock(id)).await?;
        }
        let _: Value = trx.exec(true).await?;
        Ok(())
    }

    /// Adds this pod to the pod set of `dest`. The destination's epoch
    /// grows if the set changed; the answer is the epoch after the call,
    /// which becomes the oldest this pod admits for `dest` (and a leave of
    /// `dest` not confirmed yet is dropped).
    pub async fn add_to_destination(&self, dest: &DestinationId) -> Result<u64> {
        let i = &self.inner;
        let _gate = i.write_gate.lock().await;
        let (epoch, _) = i
            .scripts
            .change_set(&i.client, &i.keys, dest, Some(&i.config.id), &[])
            .await?;
        i.fence.settled(dest, epoch, true);
        Ok(epoch)
    }

    /// Removes this pod from the pod set of `dest`, raising its own fence:
    /// from the start of the call, routed calls for `dest` are refused
    /// ([`OwnershipRefusal::Left`]), and once the removal is in Valkey only
    /// epochs from after it are admitted (routes cached before it never
    /// are, whoever claims `dest` next). The destination's epoch grows if
    /// the set changed; the answer is the epoch after the call. On an error
    /// `dest` stays refused and every heartbeat tries the removal again.
    pub async fn remove_from_destination(&self, dest: &DestinationId) -> Result<u64> {
        let i = &self.inner;
        let _gate = i.write_gate.lock().await;
        i.fence.leave_started(dest);
        self.leave(dest).await
    }

    /// Runs this pod's removal from `dest` and settles the fence on the
    /// epoch after it. The caller holds the write gate.
    async fn leave(&self, dest: &DestinationId) -> Result<u64> {
        let i = &self.inner;
        let gone = [i.config.id.as_str().to_owned()];
        let (epoch, _) = i
            .scripts
            .change_set(&i.client, &i.keys, dest, None, &gone)
            .await?;
        i.fence.settled(dest, epoch, false);
        Ok(epoch)
    }

    /// The live peers (every live member but this one) with their load,
    /// sorted by id. Dead ids are pruned from `P:members` on the way.
    pub async fn list_peer_load(&self) -> Result<Vec<MemberRecord>> {
        let i = &self.inner;
        let (raw, _): (Vec<String>, u64) = i
            .scripts
            .live_members
            .run_counted(&i.client, i.keys.members(), vec![i.keys.member_prefix()])
            .await?;
        let (_, mut live) = replies::parse_live_members(raw, &AddressPolicy::default())?;
        live.retain(|m| m.id != i.config.id);
        Ok(live)
    }

    /// The member ids in the pod set of `dest`.
    pub async fn destination_members(&self, dest: &DestinationId) -> Result<Vec<String>> {
        let i = &self.inner;
        Ok(i.client.smembers(i.keys.destination(dest)).await?)
    }
}

/// A duration as whole milliseconds for `PEXPIRE` (at least 1).
fn millis(d: std::time::Duration) -> i64 {
    i64::try_from(d.as_millis()).unwrap_or(i64::MAX).max(1)
}
