//! Ownership fencing, the pod side: whether this pod may still serve a call
//! a coordinator routed to it.
//!
//! Two checks, both by this pod's own knowledge ([`Member::check_ownership`]):
//!
//! - **its registration is live by its own clock**: a heartbeat that
//!   succeeded and *started* at `t` keeps the pod accepting routed calls
//!   until `t + 0.8 × ttl` ([`LEASE_FRACTION`]). Valkey's TTL on the member
//!   record started after `t` and runs for `ttl`, so with clock rates within
//!   20 % of each other the pod stops accepting before its record can expire
//!   and a coordinator can reassign its destinations (the elections killer's
//!   rule, applied to members);
//! - **the call's epoch is not older than the newest it has seen** for the
//!   destination (a bounded map, [`MemberConfig::fence_capacity`](super::MemberConfig::fence_capacity)
//!   destinations, least recently seen forgotten first).
//!
//! A destination the pod has **no memory of** (a process just started,
//! under a new id or the same one; a destination forgotten from the bounded
//! map) is admitted only after one read of Valkey (its first sight):
//! the call's epoch must be at least the destination's epoch *now*, and the
//! pod must be in its set. A route cached before a restart, before the
//! destination moved away while the pod was gone, is thus refused: a
//! restart under the same id is as safe as one under a new id.
//!
//! The pod's memory admits a call without a read **only where the pod
//! learned it is a member**: a read that found it outside the set (a route
//! meant for the pod that had its address before, a destination it left)
//! remembers the epoch (older ones are refused without a read) but not an
//! admission, so the next call at that epoch or a newer one reads Valkey
//! again.
//!
//! A pod **leaving** a destination ([`Member::remove_from_destination`], or
//! a routed `DELETE /destinations/{d}` it answered 2xx,
//! [`crate::http::pod::fenced`]) refuses its routed calls from the moment it
//! starts leaving, and then admits only epochs from after its leave: the
//! destination can be claimed by another pod only once the leave is in
//! Valkey, and by then this pod refuses the routes cached before it. A leave
//! that failed keeps the destination refused; each heartbeat tries it again.
//!
//! Coming back from a lapse (the lease ran out, then a heartbeat succeeds
//! again), the pod re-reads the epoch of every destination it remembers
//! before it renews the lease, bumping those whose set still holds it: a
//! route cached before the lapse then carries an older epoch and is
//! refused, so a coordinator with a warm cache cannot reach it after another
//! pod took over.

use std::collections::HashSet;
use std::num::NonZeroUsize;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use lru::LruCache;

use super::Member;
use crate::ids::DestinationId;

/// The share of the member TTL a successful heartbeat keeps the pod
/// accepting routed calls, counted from the heartbeat's start.
pub const LEASE_FRACTION: f64 = 0.8;

/// Why a pod refuses a routed call ([`Member::check_ownership`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum OwnershipRefusal {
    /// No heartbeat succeeded within the last `0.8 × ttl` by this pod's
    /// clock (or the pod deregistered): its destinations may be reassigned.
    #[error("this pod's registration is not live by its own clock")]
    LeaseExpired,
    /// The call was routed with an older assignment epoch than one this pod
    /// has already seen for the destination (or than the destination's
    /// epoch in Valkey, read on first sight).
    #[error("epoch {got} is older than epoch {newest} already seen")]
    StaleEpoch {
        /// The call's epoch.
        got: u64,
        /// The newest epoch seen for the destination.
        newest: u64,
    },
    /// First sight of the destination: this pod is not in its pod set at
    /// the destination's current epoch.
    #[error("this pod is not in the destination's pod set (epoch {epoch})")]
    NotAMember {
        /// The destination's epoch read from Valkey.
        epoch: u64,
    },
    /// This pod is leaving the destination (its leave is not confirmed by
    /// Valkey yet).
    #[error("this pod is leaving the destination")]
    Left,
    /// First sight of the destination, and its epoch could not be read
    /// from Valkey.
    #[error("the destination's epoch could not be read")]
    Unverified,
}

impl OwnershipRefusal {
    /// A short stable label: `lease_expired`, `stale_epoch`, `not_a_member`,
    /// `left` or `unverified`.
    pub fn reason(&self) -> &'static str {
        match self {
            OwnershipRefusal::LeaseExpired => "lease_expired",
            OwnershipRefusal::StaleEpoch { .. } => "stale_epoch",
            OwnershipRefusal::NotAMember { .. } => "not_a_member",
            OwnershipRefusal::Left => "left",
            OwnershipRefusal::Unverified => "unverified",
        }
    }
}

/// What [`Fence::check_known`] found.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Known {
    /// Admitted by the pod's memory.
    Admitted,
    /// The pod has no memory of the destination: read Valkey first.
    Unknown,
}

/// What the fence remembers of one destination.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Memory {
    /// The newest epoch seen (calls routed at an older one are refused).
    newest: u64,
    /// Whether this pod learned it is in the set at `newest` (its own join,
    /// a read that found it, an admitted call): only then are calls at
    /// `newest` or newer admitted without a read.
    member: bool,
}

/// The destinations the fence remembers.
struct Seen {
    /// What is remembered per destination (bounded).
    epochs: LruCache<DestinationId, Memory>,
    /// Destinations this pod is leaving, refused until the leave is in
    /// Valkey (never evicted: forgetting one would admit it on first sight
    /// before the leave lands).
    leaving: HashSet<DestinationId>,
}

/// The fence's state: the lease and what the pod knows of its destinations.
pub(super) struct Fence {
    /// The start of the latest successful heartbeat; `None` before the
    /// first and after deregistration.
    lease_start: Mutex<Option<Instant>>,
    seen: Mutex<Seen>,
    lease: Duration,
}

impl Fence {
    pub(super) fn new(ttl: Duration, capacity: NonZeroUsize) -> Self {
        Self {
            lease_start: Mutex::new(None),
            seen: Mutex::new(Seen {
                epochs: LruCache::new(capacity),
                leaving: HashSet::new(),
            }),
            lease: ttl.mul_f64(LEASE_FRACTION),
        }
    }

    /// A heartbeat that started at `started` succeeded.
    pub(super) fn renewed(&self, started: Instant) {
        let mut start = lock(&self.lease_start);
        if start.is_none_or(|s| s < started) {
            *start = Some(started);
        }
    }

    /// The pod deregistered: no routed call is accepted until it registers
    /// again.
    pub(super) fn revoked(&self) {
        *lock(&self.lease_start) = None;
    }

    /// Whether the pod's lease ran out (or was revoked) while it remembers
    /// epochs: its destinations may have been reassigned meanwhile.
    pub(super) fn lapsed(&self, now: Instant) -> bool {
        !self.live(now) && !lock(&self.seen).epochs.is_empty()
    }

    /// The destinations whose epochs the pod remembers.
    pub(super) fn known(&self) -> Vec<DestinationId> {
        lock(&self.seen)
            .epochs
            .iter()
            .map(|(d, _)| d.clone())
            .collect()
    }

    /// The destinations whose leave is not confirmed yet.
    pub(super) fn leaving(&self) -> Vec<DestinationId> {
        lock(&self.seen).leaving.iter().cloned().collect()
    }

    /// Valkey said `dest` is at `epoch` with (`member`) or without this pod
    /// in its set: remembered unless a newer epoch was seen.
    pub(super) fn learned(&self, dest: &DestinationId, epoch: u64, member: bool) {
        learn(&mut lock(&self.seen).epochs, dest, epoch, member);
    }

    /// The pod starts leaving `dest`: every routed call for it is refused
    /// until [`Fence::settled`].
    pub(super) fn leave_started(&self, dest: &DestinationId) {
        lock(&self.seen).leaving.insert(dest.clone());
    }

    /// The pod's own change of the set of `dest` (a join, `member`, or a
    /// leave) is in Valkey at `epoch`: older epochs are refused from now on.
    pub(super) fn settled(&self, dest: &DestinationId, epoch: u64, member: bool) {
        let mut seen = lock(&self.seen);
        seen.leaving.remove(dest);
        learn(&mut seen.epochs, dest, epoch, member);
    }

    fn deadline(&self) -> Option<Instant> {
        lock(&self.lease_start).map(|s| s + self.lease)
    }

    fn live(&self, now: Instant) -> bool {
        self.deadline().is_some_and(|d| now < d)
    }

    /// The check by the pod's memory alone: the lease, a leave in
    /// progress, the newest epoch seen (which `epoch` becomes when
    /// admitted). [`Known::Unknown`] when the pod remembers nothing of
    /// `dest`, or only that it was not in its set.
    pub(super) fn check_known(
        &self,
        dest: &DestinationId,
        epoch: u64,
        now: Instant,
    ) -> Result<Known, OwnershipRefusal> {
        if !self.live(now) {
            return Err(OwnershipRefusal::LeaseExpired);
        }
        let mut seen = lock(&self.seen);
        if seen.leaving.contains(dest) {
            return Err(OwnershipRefusal::Left);
        }
        match seen.epochs.get_mut(dest) {
            Some(m) if m.newest > epoch => Err(OwnershipRefusal::StaleEpoch {
                got: epoch,
                newest: m.newest,
            }),
            Some(m) if m.member => {
                m.newest = epoch;
                Ok(Known::Admitted)
            }
            Some(_) | None => Ok(Known::Unknown),
        }
    }

    /// The check on first sight of `dest`, after reading from Valkey that
    /// its epoch is `current` and whether this pod is in its set: admitted
    /// when `epoch >= current` and the pod is a member (and the lease and
    /// what the pod learned meanwhile still allow it). `current` becomes
    /// the newest epoch seen either way.
    pub(super) fn first_sight(
        &self,
        dest: &DestinationId,
        epoch: u64,
        current: u64,
        member: bool,
        now: Instant,
    ) -> Result<(), OwnershipRefusal> {
        if !self.live(now) {
            return Err(OwnershipRefusal::LeaseExpired);
        }
        let mut seen = lock(&self.seen);
        if seen.leaving.contains(dest) {
            return Err(OwnershipRefusal::Left);
        }
        learn(&mut seen.epochs, dest, current, member);
        let newest = seen.epochs.get(dest).map_or(current, |m| m.newest);
        if epoch < newest {
            return Err(OwnershipRefusal::StaleEpoch { got: epoch, newest });
        }
        if !member {
            return Err(OwnershipRefusal::NotAMember { epoch: current });
        }
        learn(&mut seen.epochs, dest, epoch, true);
        Ok(())
    }
}

/// `dest` is at `epoch`, with or without this pod (`member`): remembered
/// unless a newer epoch is. At the same epoch the set is the same, so a
/// read that found the pod there and one that did not cannot both be
/// true; membership found last wins.
fn learn(
    epochs: &mut LruCache<DestinationId, Memory>,
    dest: &DestinationId,
    epoch: u64,
    member: bool,
) {
    let new = Memory {
        newest: epoch,
        member,
    };
    match epochs.get_mut(dest) {
        Some(m) if m.newest > epoch => {}
        Some(m) => *m = new,
        None => {
            epochs.put(dest.clone(), new);
        }
    }
}

impl Member {
    /// Whether a call routed to this pod for `dest` at `epoch` may run here:
    /// this pod's registration is live by its own clock (a heartbeat that
    /// succeeded started less than `0.8 × ttl` ago), it is not leaving
    /// `dest`, and `epoch` is not older than the newest seen for `dest`
    /// (which it then becomes). A destination this pod has no memory of
    /// costs one Valkey read: `epoch` must be at least the destination's
    /// epoch now, and this pod in its set. Use [`crate::http::pod::fenced`]
    /// to apply it to every routed call of an axum app; a pod that checks
    /// here instead must also leave a destination it tears down
    /// ([`Member::remove_from_destination`]) before it answers the `DELETE`.
    pub async fn check_ownership(
        &self,
        dest: &DestinationId,
        epoch: u64,
    ) -> Result<(), OwnershipRefusal> {
        let fence = &self.inner.fence;
        if fence.check_known(dest, epoch, Instant::now())? == Known::Admitted {
            return Ok(());
        }
        let i = &self.inner;
        let (current, member) = i
            .scripts
            .seen(&i.client, &i.keys, dest, &i.config.id)
            .await
            .map_err(|err| {
                tracing::warn!(destination = %dest, %err, "cannot read the epoch of a destination seen for the first time");
                OwnershipRefusal::Unverified
            })?;
        fence.first_sight(dest, epoch, current, member, Instant::now())
    }

    /// Whether this pod accepts routed calls now: a heartbeat that succeeded
    /// started less than `0.8 × ttl` ago by this pod's clock.
    pub fn registration_live(&self) -> bool {
        self.inner.fence.live(Instant::now())
    }

    /// When this pod stops accepting routed calls unless a heartbeat
    /// succeeds before: the start of the latest successful heartbeat plus
    /// `0.8 × ttl`. `None` before the first heartbeat and after
    /// [`Member::deregister`].
    pub fn lease_deadline(&self) -> Option<Instant> {
        self.inner.fence.deadline()
    }
}

/// Locks `m`, poisoned or not (plain values).
fn lock<T>(m: &Mutex<T>) -> std::sync::MutexGuard<'_, T> {
    m.lock().unwrap_or_else(std::sync::PoisonError::into_inner)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn fence() -> Fence {
        Fence::new(Duration::from_secs(10), NonZeroUsize::new(2).unwrap())
    }

    fn d(s: &str) -> DestinationId {
        DestinationId::new(s).unwrap()
    }

    /// The whole check, against a Valkey where every destination is at
    /// epoch 0 with this pod in its set.
    fn check(
        f: &Fence,
        dest: &DestinationId,
        epoch: u64,
        now: Instant,
    ) -> Result<(), OwnershipRefusal> {
        match f.check_known(dest, epoch, now)? {
            Known::Admitted => Ok(()),
            Known::Unknown => f.first_sight(dest, epoch, 0, true, now),
        }
    }

    #[test]
    fn the_lease_ends_at_four_fifths_of_the_ttl_after_the_heartbeat_start() {
        let f = fence();
        let t0 = Instant::now();
        assert_eq!(
            check(&f, &d("a"), 1, t0),
            Err(OwnershipRefusal::LeaseExpired)
        );
        f.renewed(t0);
        assert!(check(&f, &d("a"), 1, t0 + Duration::from_millis(7_999)).is_ok());
        assert_eq!(
            check(&f, &d("a"), 1, t0 + Duration::from_secs(8)),
            Err(OwnershipRefusal::LeaseExpired)
        );
        // an older heartbeat finishing late does not move the lease back
        f.renewed(t0 + Duration::from_secs(5));
        f.renewed(t0);
        assert!(check(&f, &d("a"), 1, t0 + Duration::from_secs(12)).is_ok());
        f.revoked();
        assert_eq!(
            check(&f, &d("a"), 1, t0),
            Err(OwnershipRefusal::LeaseExpired)
        );
        assert_eq!(
            f.first_sight(&d("b"), 1, 0, true, t0),
            Err(OwnershipRefusal::LeaseExpired),
            "the lease is checked again after the read"
        );
    }

    #[test]
    fn older_epochs_are_refused_and_the_map_is_bounded() {
        let f = fence();
        let t0 = Instant::now();
        f.renewed(t0);
        assert!(check(&f, &d("a"), 3, t0).is_ok());
        assert!(check(&f, &d("a"), 3, t0).is_ok(), "the same epoch is fine");
        assert_eq!(
            check(&f, &d("a"), 2, t0),
            Err(OwnershipRefusal::StaleEpoch { got: 2, newest: 3 })
        );
        assert!(check(&f, &d("a"), 5, t0).is_ok());
        assert!(check(&f, &d("b"), 1, t0).is_ok());
        assert!(check(&f, &d("c"), 1, t0).is_ok());
        assert_eq!(lock(&f.seen).epochs.len(), 2, "bounded");
        assert_eq!(
            f.check_known(&d("a"), 5, t0),
            Ok(Known::Unknown),
            "forgotten: read again on its next sight"
        );
        f.learned(&d("c"), 0, true);
        assert!(check(&f, &d("c"), 0, t0).is_err(), "never lowered");
        f.learned(&d("c"), 9, true);
        assert!(check(&f, &d("c"), 8, t0).is_err());
    }

    #[test]
    fn first_sight_admits_only_the_current_epoch_and_a_member() {
        // a pod that just started (under any id) remembers nothing
        let f = fence();
        let t0 = Instant::now();
        f.renewed(t0);
        assert_eq!(f.check_known(&d("a"), 1, t0), Ok(Known::Unknown));
        // Valkey holds epoch 2: a route read at 1 is from before a change
        assert_eq!(
            f.first_sight(&d("a"), 1, 2, true, t0),
            Err(OwnershipRefusal::StaleEpoch { got: 1, newest: 2 })
        );
        // what was read is remembered: no second read for the same route
        assert_eq!(
            f.check_known(&d("a"), 1, t0),
            Err(OwnershipRefusal::StaleEpoch { got: 1, newest: 2 })
        );
        assert_eq!(f.check_known(&d("a"), 2, t0), Ok(Known::Admitted));
        // the current epoch, but the pod is not in the set
        assert_eq!(
            f.first_sight(&d("b"), 4, 4, false, t0),
            Err(OwnershipRefusal::NotAMember { epoch: 4 })
        );
        assert!(f.first_sight(&d("c"), 4, 4, true, t0).is_ok());
        assert!(
            f.first_sight(&d("c"), 3, 3, true, t0).is_err(),
            "learned meanwhile"
        );
    }

    #[test]
    fn what_a_refusal_remembers_is_never_an_admission() {
        // a route meant for the pod that had this address before (another
        // id): the read finds this pod outside the set at the route's epoch
        let f = fence();
        let t0 = Instant::now();
        f.renewed(t0);
        assert_eq!(
            f.first_sight(&d("b"), 4, 4, false, t0),
            Err(OwnershipRefusal::NotAMember { epoch: 4 })
        );
        assert_eq!(
            f.check_known(&d("b"), 4, t0),
            Ok(Known::Unknown),
            "the same route again is read again, not admitted by memory"
        );
        assert_eq!(f.check_known(&d("b"), 7, t0), Ok(Known::Unknown));
        assert_eq!(
            f.check_known(&d("b"), 3, t0),
            Err(OwnershipRefusal::StaleEpoch { got: 3, newest: 4 }),
            "older epochs are refused without a read"
        );
        // joined later: admitted by memory from then on
        assert!(f.first_sight(&d("b"), 5, 5, true, t0).is_ok());
        assert_eq!(f.check_known(&d("b"), 5, t0), Ok(Known::Admitted));
        // a leave, and a lapse's re-read that found the pod gone, are not
        // admissions either
        f.settled(&d("b"), 6, false);
        assert_eq!(f.check_known(&d("b"), 6, t0), Ok(Known::Unknown));
        f.learned(&d("c"), 2, false);
        assert_eq!(f.check_known(&d("c"), 2, t0), Ok(Known::Unknown));
        f.learned(&d("c"), 3, true);
        assert_eq!(f.check_known(&d("c"), 3, t0), Ok(Known::Admitted));
    }

    #[test]
    fn a_leave_refuses_everything_until_it_is_in_valkey_then_older_epochs() {
        let f = fence();
        let t0 = Instant::now();
        f.renewed(t0);
        assert!(check(&f, &d("a"), 3, t0).is_ok());
        f.leave_started(&d("a"));
        assert_eq!(check(&f, &d("a"), 3, t0), Err(OwnershipRefusal::Left));
        assert_eq!(check(&f, &d("a"), 9, t0), Err(OwnershipRefusal::Left));
        assert_eq!(
            f.first_sight(&d("a"), 9, 3, true, t0),
            Err(OwnershipRefusal::Left)
        );
        assert_eq!(f.leaving(), vec![d("a")]);
        f.settled(&d("a"), 4, false);
        assert!(f.leaving().is_empty());
        assert_eq!(
            check(&f, &d("a"), 3, t0),
            Err(OwnershipRefusal::StaleEpoch { got: 3, newest: 4 })
        );
        // a leave is never forgotten, whatever the map's bound
        f.leave_started(&d("x"));
        for n in ["p", "q", "r"] {
            assert!(check(&f, &d(n), 1, t0).is_ok());
        }
        assert_eq!(check(&f, &d("x"), 1, t0), Err(OwnershipRefusal::Left));
    }

    #[test]
    fn a_lapse_is_an_expired_lease_with_epochs_to_reaffirm() {
        let f = fence();
        let t0 = Instant::now();
        assert!(!f.lapsed(t0), "nothing known yet");
        f.renewed(t0);
        assert!(check(&f, &d("a"), 1, t0).is_ok());
        assert!(!f.lapsed(t0 + Duration::from_secs(1)));
        assert!(f.lapsed(t0 + Duration::from_secs(8)));
        assert_eq!(f.known(), vec![d("a")]);
    }
}
