//! The steps of the ownership model that change Valkey and the
//! coordinators' state: `RESOLVE`, `CLAIM` and a call's delivery.

use super::state::{Fence, Pending, State};
use super::{Bug, Ownership, bit};

impl Ownership {
    /// `RESOLVE` for coordinator `c` (its cache is empty); `pick`: the
    /// member a following claim adds (`None`: no claim).
    pub(super) fn resolve(&self, s: &mut State, c: u8, pick: Option<u8>) -> Option<()> {
        let live = s.set & s.records;
        let dead = s.set & !s.records;
        let total = s.set;
        if live != 0 && dead != 0 {
            s.set &= !dead;
            s.bump(self.config.max_epoch)?;
        }
        let usable = live & self.accepted(c);
        let rejected = live & !self.accepted(c);
        let claim = |dead: u8, rejected: u8| {
            pick.map(|pick| Pending {
                dead,
                rejected,
                pick,
            })
        };
        let epoch = s.epoch;
        let co = s.coordinator_mut(c);
        let claims = if usable != 0 {
            // a route read from the set: no claim follows it
            co.cache = Some((usable, epoch));
            false
        } else if total == 0 {
            true
        } else if rejected != 0 {
            // the fix: the policy narrows picks, no claim over a live member
            self.has(Bug::PolicyRemovesLive)
        } else {
            true
        };
        // what the claim carries: only what the seeded bug acts on
        let dead = if self.has(Bug::ClaimWithoutRecordCheck) {
            dead
        } else {
            0
        };
        let rejected = if self.has(Bug::PolicyRemovesLive) {
            rejected
        } else {
            0
        };
        match (claims, pick) {
            (true, Some(_)) => co.pending = claim(dead, rejected),
            // no claim: one action, not one per pick
            (false, None) if live != 0 => {}
            // a claim needs a pick; reading alone changes nothing
            _ => return None,
        }
        Some(())
    }

    /// `CLAIM` of coordinator `c`, sent after its read.
    pub(super) fn claim(&self, s: &mut State, c: u8) -> Option<()> {
        let pending = s.coordinators[usize::from(c)].pending?;
        s.coordinator_mut(c).pending = None;
        let checked = !self.has(Bug::ClaimWithoutRecordCheck);
        let mut gone = if checked {
            s.set & !s.records
        } else {
            s.set & pending.dead
        };
        if self.has(Bug::PolicyRemovesLive) {
            gone |= s.set & pending.rejected;
        }
        s.set &= !gone;
        let max = self.config.max_epoch;
        if checked && s.set & bit(pending.pick) != 0 {
            // the pick is in the set already (another claim added it): won,
            // nothing added
            if gone != 0 {
                s.bump(max)?;
            }
            s.coordinator_mut(c).cache = Some((bit(pending.pick), s.epoch));
        } else if s.set == 0 && (!checked || s.records & bit(pending.pick) != 0) {
            s.set = bit(pending.pick);
            s.bump(max)?;
            s.coordinator_mut(c).cache = Some((s.set, s.epoch));
        } else if gone != 0 {
            s.bump(max)?;
        }
        Some(())
    }

    /// A call of coordinator `c` reaches pod `p` at the cached epoch.
    pub(super) fn deliver(&self, s: &mut State, c: u8, p: u8) {
        let Some((_, epoch)) = s.coordinators[usize::from(c)].cache else {
            return;
        };
        let admitted = self.admits(s, p, epoch);
        let current = s.epoch;
        let pod = s.pod_mut(p);
        if pod.up && pod.lease {
            pod.fence = match pod.fence {
                Fence::Known(newest) => Fence::Known(newest.max(epoch)),
                Fence::Unknown | Fence::Read(_) if admitted => Fence::Known(epoch),
                // a first sight that refused remembers what it read
                Fence::Unknown if self.has(Bug::RefusalAdmitsLater) => Fence::Known(current),
                Fence::Unknown => Fence::Read(current),
                Fence::Read(newest) => Fence::Read(newest.max(current)),
                Fence::Leaving => Fence::Leaving,
            };
        }
        if !admitted {
            // refused, or the pod is down: the coordinator drops the route
            s.coordinator_mut(c).cache = None;
        }
    }
}
