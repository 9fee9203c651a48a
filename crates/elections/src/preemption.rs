//! Priorities with hold-down: [`Preemption`], a leader's judgement of when
//! a higher-priority candidate should take over.

use std::{collections::HashMap, time::Duration};

use tokio::time::Instant;
use ttl_storage::StorageError;

use crate::{Candidate, Leadership};

/// A leader's hold-down bookkeeping.
///
/// The leader lists the candidates ([`Leadership::candidates`]) every so
/// often and feeds each listing to [`Preemption::observe`]. A candidate is
/// **due** when its priority is strictly higher than the leader's, the
/// leader has seen its record, unchanged, in every listing for the
/// **hold-down** (by the leader's own monotonic clock; the `since` a
/// record claims is never trusted), and the leader has led for its
/// **minimum tenure**. The leader then hands over to it by the ordinary
/// graceful path ([`Leadership::hand_over`]): no other safety path exists.
///
/// No flapping, by construction: a record missing from one listing (gone,
/// expired, or unreadable), or changed (a candidacy with a priority that
/// lost its slot announces itself anew with a new `since`, and a restarted
/// process has a new id), starts its hold-down again. Equal priorities
/// never preempt. A preemption ends the tenure, and the next leader is not
/// preempted before its own minimum tenure: at most one preemption per
/// tenure. See `docs/guarantees.md`.
#[derive(Debug, Clone)]
pub struct Preemption {
    own: i32,
    hold_down: Duration,
    min_tenure: Duration,
    tenure_start: Instant,
    /// Each listed record (its bytes: id, since, priority, value) and when
    /// this leader first saw it in an unbroken run of listings.
    seen: HashMap<Vec<u8>, Instant>,
}

impl Preemption {
    /// The default hold-down for leadership duration `lease`: two leases.
    pub fn default_hold_down(lease: Duration) -> Duration {
        lease.saturating_mul(2)
    }

    /// The bookkeeping of a leader of priority `own` whose tenure starts
    /// now: a higher-priority candidate is due once it has stood for
    /// `hold_down` and the leader has led for `min_tenure`.
    pub fn new(own: i32, hold_down: Duration, min_tenure: Duration) -> Self {
        Preemption {
            own,
            hold_down,
            min_tenure,
            tenure_start: Instant::now(),
            seen: HashMap::new(),
        }
    }

    /// Records one listing (taken at `now`) and returns the candidate due,
    /// if any: the first of `listed` (highest priority, then
    /// longest-waiting) whose priority is above the leader's and that has
    /// been seen in every listing for the hold-down, once the minimum
    /// tenure has passed. Records not in `listed` are forgotten.
    pub fn observe_at(&mut self, now: Instant, listed: &[Candidate]) -> Option<Candidate> {
        let mut seen = HashMap::with_capacity(listed.len());
        for candidate in listed {
            let first = self.seen.get(&candidate.record).copied().unwrap_or(now);
            seen.insert(candidate.record.clone(), first);
        }
        self.seen = seen;
        if now.saturating_duration_since(self.tenure_start) < self.min_tenure {
            return None;
        }
        listed
            .iter()
            .filter(|c| c.priority > self.own)
            .find(|c| {
                self.seen
                    .get(&c.record)
                    .is_some_and(|first| now.saturating_duration_since(*first) >= self.hold_down)
            })
            .cloned()
    }

    /// [`observe_at`](Self::observe_at) with the current time.
    pub fn observe(&mut self, listed: &[Candidate]) -> Option<Candidate> {
        self.observe_at(Instant::now(), listed)
    }

    /// Forgets every candidate seen (a listing failed: nobody has been
    /// seen continuously across it).
    pub fn forget(&mut self) {
        self.seen.clear();
    }
}

impl Leadership {
    /// Lists the candidates and feeds the listing to `preemption`: the
    /// candidate this leadership should now hand over to
    /// ([`Leadership::hand_over`]), if any. A listing that fails forgets
    /// every candidate seen so far and returns the error.
    ///
    /// # Errors
    ///
    /// The store's error when no candidate slot could be read.
    pub async fn preemption_due(
        &self,
        preemption: &mut Preemption,
    ) -> Result<Option<Candidate>, StorageError> {
        match self.candidates().await {
            Ok(listed) => Ok(preemption.observe(&listed)),
            Err(err) => {
                preemption.forget();
                Err(err)
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use std::time::UNIX_EPOCH;

    use super::*;
    use crate::CandidateId;

    fn candidate(n: u32, priority: i32, since_ms: u64) -> Candidate {
        let id = CandidateId(format!("{:016x}{n:08x}", 7));
        Candidate {
            value: format!("c{n}").into_bytes(),
            since: UNIX_EPOCH + Duration::from_millis(since_ms),
            record: format!("cand2 {since_ms} {id} {priority} c{n}").into_bytes(),
            id,
            priority,
            slot: 0,
        }
    }

    const S: Duration = Duration::from_secs(1);

    #[tokio::test(start_paused = true)]
    async fn due_after_the_hold_down_and_the_tenure_never_for_equals() {
        let t0 = Instant::now();
        let mut p = Preemption::new(1, 4 * S, 6 * S);
        let high = candidate(1, 2, 10);
        let equal = candidate(2, 1, 5);
        let listed = [high.clone(), equal.clone()];
        for s in 0..6 {
            assert!(p.observe_at(t0 + s * S, &listed).is_none(), "at {s}s");
        }
        // Stood 6 s, tenure 6 s: due. The equal one never is.
        assert_eq!(p.observe_at(t0 + 6 * S, &listed), Some(high));
        let mut only_equal = Preemption::new(1, S, S);
        for s in 0..20 {
            assert!(
                only_equal
                    .observe_at(t0 + s * S, std::slice::from_ref(&equal))
                    .is_none()
            );
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_record_that_vanishes_or_changes_starts_its_hold_down_again() {
        let t0 = Instant::now();
        let mut p = Preemption::new(0, 4 * S, Duration::ZERO);
        let high = candidate(1, 5, 10);
        // Up 3 s, gone one listing, up 3 s: never 4 s in a row.
        for round in 0..5u32 {
            let base = t0 + round * 4 * S;
            for s in 0..3 {
                assert!(
                    p.observe_at(base + s * S, std::slice::from_ref(&high))
                        .is_none()
                );
            }
            assert!(p.observe_at(base + 3 * S, &[]).is_none());
        }
        // Announced anew (a new since): a new record, a new hold-down.
        let base = t0 + 20 * S;
        for s in 0..8u32 {
            let anew = candidate(1, 5, 100 + u64::from(s));
            assert!(p.observe_at(base + s * S, &[anew]).is_none());
        }
        let again = candidate(1, 5, 200);
        // A failed listing forgets.
        for s in 0..3u32 {
            assert!(
                p.observe_at(base + (10 + s) * S, std::slice::from_ref(&again))
                    .is_none()
            );
        }
        p.forget();
        assert!(
            p.observe_at(base + 14 * S, std::slice::from_ref(&again))
                .is_none()
        );
        assert_eq!(
            p.observe_at(base + 18 * S, std::slice::from_ref(&again)),
            Some(again.clone())
        );
    }

    #[tokio::test(start_paused = true)]
    async fn the_highest_due_first_and_lower_priorities_never() {
        let t0 = Instant::now();
        let mut p = Preemption::new(3, S, Duration::ZERO);
        let listed = [candidate(1, 9, 50), candidate(2, 4, 1), candidate(3, -1, 0)];
        assert!(p.observe_at(t0, &listed).is_none());
        assert_eq!(p.observe_at(t0 + S, &listed), Some(listed[0].clone()));
        let lower = [candidate(3, -1, 0), candidate(4, 3, 0)];
        let mut p = Preemption::new(3, S, Duration::ZERO);
        for s in 0..10 {
            assert!(p.observe_at(t0 + s * S, &lower).is_none());
        }
    }
}
