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
//! Coming back from a lapse (the lease ran out, then a heartbeat succeeds
//! again), the pod re-reads the epoch of every destination it remembers
//! before it renews the lease, bumping those whose set still holds it: a
//! route cached before the lapse then carries an older epoch and is
//! refused, so a coordinator with a warm cache cannot reach it after another
//! pod took over.

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
    /// has already seen for the destination.
    #[error("epoch {got} is older than epoch {newest} already seen")]
    StaleEpoch {
        /// The call's epoch.
        got: u64,
        /// The newest epoch seen for the destination.
        newest: u64,
    },
}

impl OwnershipRefusal {
    /// A short stable label: `lease_expired` or `stale_epoch`.
    pub fn reason(&self) -> &'static str {
        match self {
            OwnershipRefusal::LeaseExpired => "lease_expired",
            OwnershipRefusal::StaleEpoch { .. } => "stale_epoch",
        }
    }
}

/// The fence's state: the lease and the newest epochs seen.
pub(super) struct Fence {
    /// The start of the latest successful heartbeat; `None` before the
    /// first and after deregistration.
    lease_start: Mutex<Option<Instant>>,
    epochs: Mutex<LruCache<DestinationId, u64>>,
    lease: Duration,
}

impl Fence {
    pub(super) fn new(ttl: Duration, capacity: NonZeroUsize) -> Self {
        Self {
            lease_start: Mutex::new(None),
            epochs: Mutex::new(LruCache::new(capacity)),
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
        self.deadline().is_none_or(|d| now >= d) && !lock(&self.epochs).is_empty()
    }

    /// The destinations whose epochs the pod remembers.
    pub(super) fn known(&self) -> Vec<DestinationId> {
        lock(&self.epochs).iter().map(|(d, _)| d.clone()).collect()
    }

    /// `epoch` becomes the newest seen for `dest` unless a newer one was.
    pub(super) fn raise(&self, dest: &DestinationId, epoch: u64) {
        let mut epochs = lock(&self.epochs);
        match epochs.get_mut(dest) {
            Some(newest) => *newest = (*newest).max(epoch),
            None => {
                epochs.put(dest.clone(), epoch);
            }
        }
    }

    fn deadline(&self) -> Option<Instant> {
        lock(&self.lease_start).map(|s| s + self.lease)
    }

    fn check(
        &self,
        dest: &DestinationId,
        epoch: u64,
        now: Instant,
    ) -> Result<(), OwnershipRefusal> {
        if self.deadline().is_none_or(|d| now >= d) {
            return Err(OwnershipRefusal::LeaseExpired);
        }
        let mut epochs = lock(&self.epochs);
        match epochs.get_mut(dest) {
            Some(newest) if *newest > epoch => Err(OwnershipRefusal::StaleEpoch {
                got: epoch,
                newest: *newest,
            }),
            Some(newest) => {
                *newest = epoch;
                Ok(())
            }
            None => {
                epochs.put(dest.clone(), epoch);
                Ok(())
            }
        }
    }
}

impl Member {
    /// Whether a call routed to this pod for `dest` at `epoch` may run here:
    /// this pod's registration is live by its own clock (a heartbeat that
    /// succeeded started less than `0.8 × ttl` ago) and `epoch` is not older
    /// than the newest seen for `dest` (which it then becomes). Use
    /// [`crate::http::pod::fenced`] to apply it to every routed call of an
    /// axum app.
    pub fn check_ownership(
        &self,
        dest: &DestinationId,
        epoch: u64,
    ) -> Result<(), OwnershipRefusal> {
        self.inner.fence.check(dest, epoch, Instant::now())
    }

    /// Whether this pod accepts routed calls now: a heartbeat that succeeded
    /// started less than `0.8 × ttl` ago by this pod's clock.
    pub fn registration_live(&self) -> bool {
        self.lease_deadline().is_some_and(|d| Instant::now() < d)
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

    #[test]
    fn the_lease_ends_at_four_fifths_of_the_ttl_after_the_heartbeat_start() {
        let f = fence();
        let t0 = Instant::now();
        assert_eq!(f.check(&d("a"), 1, t0), Err(OwnershipRefusal::LeaseExpired));
        f.renewed(t0);
        assert!(
            f.check(&d("a"), 1, t0 + Duration::from_millis(7_999))
                .is_ok()
        );
        assert_eq!(
            f.check(&d("a"), 1, t0 + Duration::from_secs(8)),
            Err(OwnershipRefusal::LeaseExpired)
        );
        // an older heartbeat finishing late does not move the lease back
        f.renewed(t0 + Duration::from_secs(5));
        f.renewed(t0);
        assert!(f.check(&d("a"), 1, t0 + Duration::from_secs(12)).is_ok());
        f.revoked();
        assert_eq!(f.check(&d("a"), 1, t0), Err(OwnershipRefusal::LeaseExpired));
    }

    #[test]
    fn older_epochs_are_refused_and_the_map_is_bounded() {
        let f = fence();
        let t0 = Instant::now();
        f.renewed(t0);
        assert!(f.check(&d("a"), 3, t0).is_ok());
        assert!(f.check(&d("a"), 3, t0).is_ok(), "the same epoch is fine");
        assert_eq!(
            f.check(&d("a"), 2, t0),
            Err(OwnershipRefusal::StaleEpoch { got: 2, newest: 3 })
        );
        assert!(f.check(&d("a"), 5, t0).is_ok());
        assert!(f.check(&d("b"), 1, t0).is_ok());
        assert!(f.check(&d("c"), 1, t0).is_ok());
        assert_eq!(lock(&f.epochs).len(), 2, "bounded");
        f.raise(&d("c"), 0);
        assert!(f.check(&d("c"), 0, t0).is_err(), "raise never lowers");
        f.raise(&d("c"), 9);
        assert!(f.check(&d("c"), 8, t0).is_err());
    }

    #[test]
    fn a_lapse_is_an_expired_lease_with_epochs_to_reaffirm() {
        let f = fence();
        let t0 = Instant::now();
        assert!(!f.lapsed(t0), "nothing known yet");
        f.renewed(t0);
        assert!(f.check(&d("a"), 1, t0).is_ok());
        assert!(!f.lapsed(t0 + Duration::from_secs(1)));
        assert!(f.lapsed(t0 + Duration::from_secs(8)));
        assert_eq!(f.known(), vec![d("a")]);
    }
}
