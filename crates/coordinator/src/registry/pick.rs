//! Every choice of a member for a call, in one place: this file (and
//! [`fan_out`](super::fan_out) for the pod side) is the only caller of the
//! [`Strategy`](crate::strategy::Strategy).
//!
//! The strategy runs when something is allocated and to spread calls over a
//! fanned-out destination, never for a destination bound to one pod:
//!
//! | when | purpose | candidates |
//! |---|---|---|
//! | a call to a destination with two or more live pods ([`Registry::route`]) | [`PickPurpose::Request`] | the live pod set (cached, or read by the resolve script) |
//! | first touch: an unbound destination with `claim_on_miss` | [`PickPurpose::FirstTouch`] | every live member |
//! | failover: every pod of the set dead, with `reassign_orphans` | [`PickPurpose::Failover`] | every live member |
//! | a member for something new: `PUT` of an unbound destination, `POST /destinations` ([`Registry::pick_member`]) | [`PickPurpose::FirstTouch`] | every live member |
//! | a pod refused the connection ([`Registry::reroute`]) | as the first pick | the same candidates without the failed member |
//!
//! The HTTP layer asks ([`Registry::route`], [`Registry::bind_target`],
//! [`Registry::pick_member`], [`Registry::reroute`]) and forwards.

use super::{Counters, Registry, Resolution, ResolveOptions, Route, RouteSource};
use crate::cache::PodSet;
use crate::error::Result;
use crate::ids::{DestinationId, MemberId};
use crate::record::MemberRecord;
use crate::strategy::{self, PickContext, PickPurpose};

/// How a call was routed, so that the registry can choose again after the
/// chosen pod refused the connection (the pod never saw the call).
#[derive(Clone, Copy, Debug)]
pub(crate) enum Reroute<'a> {
    /// By the destination's pod set, resolved with these options. The cached
    /// set is dropped and re-read from Valkey; another live member of it is
    /// preferred (picked with [`PickPurpose::Request`]).
    Destination(&'a DestinationId, ResolveOptions),
    /// By a fresh pick among the live members (*pick and register*, with the
    /// destination; *register from response*, without): another live member
    /// is picked with [`PickPurpose::FirstTouch`].
    Allocation(Option<&'a DestinationId>),
}

/// Where a `PUT /destinations/{d}` (*pick and register*) goes.
#[derive(Clone, Debug)]
pub(crate) struct BindTarget {
    /// The member to forward to.
    pub(crate) member: MemberRecord,
    /// Whether it already serves the destination (nothing to bind).
    pub(crate) bound: bool,
    /// The destination's epoch when it is bound.
    pub(crate) epoch: Option<u64>,
}

impl Registry {
    /// The route for one call from the destination's live pod `set`: a
    /// single pod serves a request as is, otherwise the strategy picks.
    pub(super) fn pick_from(
        &self,
        dest: &DestinationId,
        set: PodSet,
        epoch: u64,
        purpose: PickPurpose,
        source: RouteSource,
    ) -> Resolution {
        // a destination bound to one pod goes to it: the strategy runs only
        // to allocate (first touch, failover) or to spread a fan-out
        if purpose == PickPurpose::Request && set.len() == 1 {
            return Resolution::Routed(Route {
                member: set[0].clone(),
                set,
                source,
                epoch,
            });
        }
        let ctx = PickContext {
            destination: Some(dest),
            purpose,
        };
        match strategy::pick(self.inner.strategy.as_ref(), &set, &ctx) {
            Some(m) => Resolution::Routed(Route {
                member: m.clone(),
                set: set.clone(),
                source,
                epoch,
            }),
            None => Resolution::NoLiveMember,
        }
    }

    /// Picks a live member with the strategy ([`PickPurpose::FirstTouch`]),
    /// without binding anything. One round trip.
    pub async fn pick_member(&self, dest: Option<&DestinationId>) -> Result<Option<MemberRecord>> {
        let live = self.list_live_members().await?;
        let ctx = PickContext {
            destination: dest,
            purpose: PickPurpose::FirstTouch,
        };
        Ok(strategy::pick(self.inner.strategy.as_ref(), &live, &ctx).cloned())
    }

    /// The member for *pick and register*: the destination's live member
    /// when it has one (`bound`), else a fresh pick with the strategy. `None`
    /// when no member is live.
    pub(crate) async fn bind_target(&self, dest: &DestinationId) -> Result<Option<BindTarget>> {
        let opts = ResolveOptions {
            claim_on_miss: false,
            reassign_orphans: false,
        };
        let target = match self.route(dest, opts).await? {
            Resolution::Routed(r) => Some(BindTarget {
                member: r.member,
                bound: true,
                epoch: Some(r.epoch),
            }),
            Resolution::Unbound | Resolution::NoLiveMember => self
                .pick_member(Some(dest))
                .await?
                .map(|member| BindTarget {
                    member,
                    bound: false,
                    epoch: None,
                }),
        };
        Ok(target)
    }

    /// Another member for a call routed `by`, after `failed` refused the
    /// connection. `None` when there is none (the caller answers with the
    /// connect error). A destination's cached set is dropped first, so the
    /// answer reflects Valkey; `failed` may come back when it is the only
    /// live member of the destination's set. With the member comes the
    /// destination's epoch, for a destination route.
    pub(crate) async fn reroute(
        &self,
        by: Reroute<'_>,
        failed: &MemberId,
    ) -> Result<Option<(MemberRecord, Option<u64>)>> {
        match by {
            Reroute::Destination(dest, opts) => {
                self.evict(dest);
                let Resolution::Routed(route) = self.resolve_destination(dest, opts).await? else {
                    return Ok(None);
                };
                let epoch = Some(route.epoch);
                let others: Vec<MemberRecord> = route
                    .set
                    .iter()
                    .filter(|m| m.id != *failed)
                    .cloned()
                    .collect();
                if route.member.id != *failed || others.is_empty() {
                    return Ok(Some((route.member, epoch)));
                }
                Ok(self
                    .pick_in(Some(dest), &others, PickPurpose::Request)
                    .map(|m| (m, epoch)))
            }
            Reroute::Allocation(dest) => {
                if let Some(dest) = dest {
                    self.evict(dest);
                }
                let live: Vec<MemberRecord> = self
                    .list_live_members()
                    .await?
                    .into_iter()
                    .filter(|m| m.id != *failed)
                    .collect();
                Ok(self
                    .pick_in(dest, &live, PickPurpose::FirstTouch)
                    .map(|m| (m, None)))
            }
        }
    }

    /// The route for a call whose pod refused it as a stale owner (the
    /// ownership fence): the cached set is dropped and `dest` resolved again
    /// from Valkey, once.
    pub(crate) async fn reresolve(
        &self,
        dest: &DestinationId,
        opts: ResolveOptions,
    ) -> Result<Resolution> {
        self.evict(dest);
        Counters::add(&self.inner.counters.stale_owner_refusals, 1);
        self.resolve_destination(dest, opts).await
    }

    /// Runs the strategy over `candidates` for `dest` (a single candidate
    /// is taken as is).
    fn pick_in(
        &self,
        dest: Option<&DestinationId>,
        candidates: &[MemberRecord],
        purpose: PickPurpose,
    ) -> Option<MemberRecord> {
        if candidates.len() == 1 {
            return candidates.first().cloned();
        }
        let ctx = PickContext {
            destination: dest,
            purpose,
        };
        strategy::pick(self.inner.strategy.as_ref(), candidates, &ctx).cloned()
    }
}
