//! Destination resolution: the design's failure-handover flow, plus the
//! cached hot path.

use std::sync::{Arc, Mutex};

use fred::prelude::*;

use super::{Counters, Registry};
use crate::cache::PodSet;
use crate::error::Result;
use crate::ids::{DestinationId, MemberId};
use crate::keys::fields;
use crate::record::MemberRecord;
use crate::strategy::PickPurpose;
use crate::telemetry;
use crate::valkey::replies;

/// Reads of a destination after claims lost to concurrent ones, at most.
const CLAIM_ATTEMPTS: usize = 3;

/// What to do when a destination has no usable pod.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct ResolveOptions {
    /// An empty or missing set: pick a live member and `SADD` it (first
    /// touch). Otherwise the answer is [`Resolution::Unbound`].
    pub claim_on_miss: bool,
    /// A non-empty set whose members are all dead: remove them and `SADD` a
    /// fresh live member. Otherwise the answer is [`Resolution::NoLiveMember`].
    pub reassign_orphans: bool,
}

impl Default for ResolveOptions {
    /// Claim on miss and reassign orphans.
    fn default() -> Self {
        Self {
            claim_on_miss: true,
            reassign_orphans: true,
        }
    }
}

/// Where a route came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum RouteSource {
    /// The local cache (no Valkey round trip).
    Cache,
    /// The destination's existing live pod set.
    Bound,
    /// First touch: the destination was unbound and got a member.
    Claimed,
    /// Failover: every member was dead and a fresh one replaced them.
    Reassigned,
}

/// A member to forward to, and the destination's live pod set.
#[derive(Clone, Debug)]
pub struct Route {
    /// The member picked for this call.
    pub member: MemberRecord,
    /// The live pod set the pick was made from, sorted by id.
    pub set: Arc<[MemberRecord]>,
    /// How the route was found.
    pub source: RouteSource,
    /// The destination's assignment epoch (`P:epoch:<id>`) the set was read
    /// at: it grows with every change of the set. Forwarded calls carry it
    /// (ownership fencing, [`crate::http::pod`]).
    pub epoch: u64,
}

impl Route {
    /// Whether the destination was just reassigned away from dead members.
    pub fn reassigned(&self) -> bool {
        self.source == RouteSource::Reassigned
    }
}

/// The answer of [`Registry::resolve_destination`] and [`Registry::route`].
#[derive(Clone, Debug)]
pub enum Resolution {
    /// Forward to `route.member`.
    Routed(Route),
    /// The destination has no pod set and claiming was not asked for (HTTP 404).
    Unbound,
    /// No live member can serve the destination (HTTP 503).
    NoLiveMember,
}

impl Resolution {
    /// The route, if any.
    pub fn route(&self) -> Option<&Route> {
        match self {
            Resolution::Routed(r) => Some(r),
            _ => None,
        }
    }
}

impl Registry {
    /// Routes one call for `dest`: from the local cache when warm, otherwise
    /// through [`Registry::resolve_destination`]. A destination bound to one
    /// pod goes to it without running the strategy; for a fanned-out
    /// destination the strategy picks per call from the cached pod set
    /// ([`PickPurpose::Request`]), so it keeps spreading.
    pub async fn route(&self, dest: &DestinationId, opts: ResolveOptions) -> Result<Resolution> {
        let i = &self.inner;
        if let Some((set, epoch)) = i.cache.get(dest) {
            let set = if i.strategy.uses_load() && set.len() > 1 {
                match Box::pin(self.refresh_loads(&set)).await? {
                    Some(fresh) => fresh,
                    None => {
                        // a member vanished: resolve from scratch
                        i.cache.evict(dest);
                        Counters::add(&i.counters.cache_misses, 1);
                        return Box::pin(self.resolve_coalesced(dest, opts)).await;
                    }
                }
            } else {
                set
            };
            Counters::add(&i.counters.cache_hits, 1);
            telemetry::route_lookup("hit");
            return Ok(self.pick_from(dest, set, epoch, PickPurpose::Request, RouteSource::Cache));
        }
        Counters::add(&i.counters.cache_misses, 1);
        // boxed: the Valkey lookup's large state is allocated only on a miss,
        // so a cache hit's future stays small
        Box::pin(self.resolve_coalesced(dest, opts)).await
    }

    /// [`Registry::resolve_destination`], shared by concurrent callers: when
    /// many calls miss the cache for one destination at once (an entry
    /// expiring under load), one lookup goes to Valkey and all of them get
    /// its answer.
    async fn resolve_coalesced(
        &self,
        dest: &DestinationId,
        opts: ResolveOptions,
    ) -> Result<Resolution> {
        let key = (dest.clone(), opts);
        // Whether this call ran the lookup (a miss) or shared another's: a
        // lookup still running, or one that ended (and filled the cache)
        // between this call's cache check and its turn here.
        let outcome = Mutex::new("coalesced");
        let resolution = self
            .inner
            .flights
            .run(&key, || async {
                let i = &self.inner;
                if let Some((set, epoch)) = i.cache.get(dest)
                    && !(i.strategy.uses_load() && set.len() > 1)
                {
                    return Ok(self.pick_from(
                        dest,
                        set,
                        epoch,
                        PickPurpose::Request,
                        RouteSource::Cache,
                    ));
                }
                *lock(&outcome) = "miss";
                self.resolve_destination(dest, opts).await
            })
            .await;
        telemetry::route_lookup(*lock(&outcome));
        resolution
    }

    /// Re-reads `load` of every member in `set` (one pipelined round trip).
    /// `None` if one of them has no record any more.
    async fn refresh_loads(&self, set: &PodSet) -> Result<Option<PodSet>> {
        let i = &self.inner;
        let pipe = i.client.pipeline();
        for m in set.iter() {
            let _: () = pipe.hget(i.keys.member(&m.id), fields::LOAD).await?;
        }
        let loads: Vec<Option<String>> = pipe.all().await?;
        self.round_trips(1);
        let mut out = Vec::with_capacity(set.len());
        for (m, load) in set.iter().zip(loads) {
            let Some(load) = load else { return Ok(None) };
            out.push(MemberRecord {
                load: crate::record::parse_load(&load),
                ..m.clone()
            });
        }
        Ok(Some(out.into()))
    }

    /// Resolves `dest` from Valkey (bypassing the cache, then refreshing it),
    /// following the design's failure-handover flow:
    ///
    /// - live members: pick one with the strategy; dead members of the set
    ///   are removed (`SREM`) in the same atomic script;
    /// - empty or missing set: [`Resolution::Unbound`], or with
    ///   `claim_on_miss` a first-touch claim (`SADD` of a picked live member,
    ///   only while the set is still empty: of concurrent claimers, one
    ///   wins and the others read its member);
    /// - all members dead: [`Resolution::NoLiveMember`], or with
    ///   `reassign_orphans` `SREM` the dead and `SADD` a fresh live member
    ///   in one script, reported as [`RouteSource::Reassigned`], unless a
    ///   concurrent reassignment filled the set first or a member read as
    ///   dead came back (the script checks the member records itself when
    ///   it runs): then the set is read again and its member used;
    /// - live members, none of them inside this coordinator's
    ///   [`AddressPolicy`](crate::AddressPolicy): [`Resolution::NoLiveMember`].
    ///   The policy narrows what this coordinator picks; it never takes the
    ///   destination from a live member.
    pub async fn resolve_destination(
        &self,
        dest: &DestinationId,
        opts: ResolveOptions,
    ) -> Result<Resolution> {
        // a claim lost to another coordinator's is followed by a fresh read
        // of the set the winner wrote
        for _ in 1..CLAIM_ATTEMPTS {
            if let Some(resolution) = self.resolve_once(dest, opts).await? {
                return Ok(resolution);
            }
        }
        Ok(self
            .resolve_once(dest, opts)
            .await?
            .unwrap_or(Resolution::NoLiveMember))
    }

    /// One read of the set and, when needed, one claim; `None` when the
    /// claim was lost to a concurrent one.
    async fn resolve_once(
        &self,
        dest: &DestinationId,
        opts: ResolveOptions,
    ) -> Result<Option<Resolution>> {
        let i = &self.inner;
        let (raw, rt): (Vec<String>, u64) = i
            .scripts
            .resolve
            .run_counted(
                &i.client,
                vec![i.keys.destination(dest), i.keys.epoch(dest)],
                vec![i.keys.member_prefix(), "1".to_owned()],
            )
            .await?;
        self.round_trips(rt);
        let reply = replies::parse_resolve(raw, &i.policy)?;

        if !reply.live.is_empty() {
            if !reply.dead.is_empty() {
                tracing::info!(destination = %dest, dead = ?reply.dead, "removed dead members from destination");
                Counters::add(&i.counters.pruned, reply.dead.len() as u64);
            }
            let set: PodSet = reply.live.into();
            i.cache.insert(dest.clone(), set.clone(), reply.epoch);
            return Ok(Some(self.pick_from(
                dest,
                set,
                reply.epoch,
                PickPurpose::Request,
                RouteSource::Bound,
            )));
        }

        if reply.total == 0 {
            if !opts.claim_on_miss {
                return Ok(Some(Resolution::Unbound));
            }
            return self.claim(dest, PickPurpose::FirstTouch).await;
        }

        if !reply.rejected.is_empty() {
            // live members this coordinator's address policy will not
            // forward to: the policy narrows what this coordinator picks,
            // it never takes a destination from a live member (other
            // coordinators may be routing to it)
            tracing::warn!(destination = %dest, members = ?reply.rejected, "every live member of the destination is outside this coordinator's address policy");
            return Ok(Some(Resolution::NoLiveMember));
        }
        if !opts.reassign_orphans {
            return Ok(Some(Resolution::NoLiveMember));
        }
        self.claim(dest, PickPurpose::Failover).await
    }

    /// First touch or failover: picks a live member and adds it to the set
    /// of `dest` with the `CLAIM` script, which removes the members
    /// whose record is gone *when it runs* and adds the pick only if none
    /// is left. A member read as dead that came back meanwhile is kept, and
    /// the claim is lost (`None`: read the set again), as when another
    /// coordinator's claim filled the set first.
    async fn claim(
        &self,
        dest: &DestinationId,
        purpose: PickPurpose,
    ) -> Result<Option<Resolution>> {
        let i = &self.inner;
        let live: PodSet = self.list_live_members().await?.into();
        let source = match purpose {
            PickPurpose::Failover => RouteSource::Reassigned,
            _ => RouteSource::Claimed,
        };
        let res = self.pick_from(dest, live, 0, purpose, source);
        let Resolution::Routed(mut route) = res else {
            return Ok(Some(res));
        };
        let claimed = i
            .scripts
            .claim(&i.client, &i.keys, dest, &route.member.id)
            .await?;
        self.round_trips(claimed.round_trips);
        Counters::add(&i.counters.pruned, claimed.pruned as u64);
        if !claimed.won {
            tracing::info!(destination = %dest, member = %route.member.id, "claim lost (a live member holds the destination); reading the set again");
            return Ok(None);
        }
        route.epoch = claimed.epoch;
        let epoch = claimed.epoch;
        if purpose == PickPurpose::Failover {
            Counters::add(&i.counters.reassignments, 1);
            tracing::info!(destination = %dest, member = %route.member.id, pruned = claimed.pruned, epoch, "reassigned orphaned destination");
        } else {
            Counters::add(&i.counters.claims, 1);
            tracing::info!(destination = %dest, member = %route.member.id, epoch, "first-touch claim");
        }
        route.set = Arc::from(vec![route.member.clone()]);
        i.cache.insert(dest.clone(), route.set.clone(), route.epoch);
        Ok(Some(Resolution::Routed(route)))
    }

    /// Adds `add` to and removes `remove` from the pod set of `dest` in one
    /// script, bumping the destination's epoch when the set changed. Returns
    /// the epoch after the change. One round trip.
    pub(super) async fn change_set(
        &self,
        dest: &DestinationId,
        add: Option<&MemberId>,
        remove: &[String],
    ) -> Result<u64> {
        let i = &self.inner;
        let (epoch, rt) = i
            .scripts
            .change_set(&i.client, &i.keys, dest, add, remove)
            .await?;
        self.round_trips(rt);
        Ok(epoch)
    }
}

/// Locks `m`, poisoned or not (the value is a plain label).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}
