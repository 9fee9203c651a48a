//! Allocation strategies: which member gets a destination at first touch and
//! at failover, and which member of a fanned-out destination serves a call.
//!
//! As the design says, the strategy runs only when something is allocated
//! (first touch, failover) and to spread calls over a fanned-out
//! destination's pods; a call to a destination bound to one pod goes to that
//! pod without asking the strategy. The built-in strategies keep their
//! allocation state (claim cursor) apart from the per-call spreading, so
//! where new destinations land does not depend on the traffic in between.
//!
//! Only the registry (`registry/`) runs a strategy: a coordinator's
//! [`Registry`](crate::Registry) for its picks, a pod's
//! [`Member`](crate::Member) for fan-out (with its own strategy,
//! [`MemberConfig::fan_out_strategy`](crate::MemberConfig::fan_out_strategy),
//! since the pod does not share the coordinators' process).

use std::fmt::Debug;
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use rand::Rng;

use crate::ids::DestinationId;
use crate::record::MemberRecord;

/// Why the registry is asking for a pick.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum PickPurpose {
    /// The destination has no pod set yet.
    FirstTouch,
    /// Every member of the destination's set is dead.
    Failover,
    /// Choosing the target of one call among a fanned-out destination's
    /// live set (two or more pods).
    Request,
    /// A saturated pod adds a peer to the destination's set (pod-side
    /// fan-out, with [`MemberConfig::fan_out_strategy`](crate::MemberConfig::fan_out_strategy)):
    /// the candidates are the live peers not yet in the set. An allocation,
    /// like first touch: the built-ins use their allocation cursor.
    FanOut,
}

/// What a strategy knows about the pick.
#[derive(Clone, Copy, Debug)]
pub struct PickContext<'a> {
    /// The destination being routed, if any.
    pub destination: Option<&'a DestinationId>,
    /// Why the pick happens.
    pub purpose: PickPurpose,
}

/// Chooses one member among `candidates`.
///
/// Candidates are live members sorted by id and never empty. Return the index
/// of the chosen one, or `None` to refuse (the call then fails with 503).
/// Implementations must be cheap: they run on the request path.
pub trait Strategy: Send + Sync + Debug {
    /// Picks an index into `candidates`.
    fn pick(&self, candidates: &[MemberRecord], ctx: &PickContext<'_>) -> Option<usize>;

    /// Whether the strategy reads `load`: the registry then refreshes the loads
    /// of a fanned-out destination on every call (one extra round trip).
    fn uses_load(&self) -> bool {
        false
    }
}

/// A shared strategy.
pub type DynStrategy = Arc<dyn Strategy>;

/// Cycles through the candidates; no Valkey reads. Allocations (first
/// touch, failover) and per-call spreading each have their own cursor.
#[derive(Debug, Default)]
pub struct RoundRobin {
    claims: AtomicUsize,
    spread: AtomicUsize,
}

/// The cursor for `purpose`: allocation or per-call spreading.
fn cursor<'a>(
    claims: &'a AtomicUsize,
    spread: &'a AtomicUsize,
    purpose: PickPurpose,
) -> &'a AtomicUsize {
    match purpose {
        PickPurpose::Request => spread,
        _ => claims,
    }
}

impl RoundRobin {
    /// A round-robin strategy starting at the first candidate.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Strategy for RoundRobin {
    fn pick(&self, candidates: &[MemberRecord], ctx: &PickContext<'_>) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        let cursor = cursor(&self.claims, &self.spread, ctx.purpose);
        Some(cursor.fetch_add(1, Ordering::Relaxed) % candidates.len())
    }
}

/// Picks the smallest `load`; ties are broken round-robin, with separate
/// cursors for allocations and for per-call spreading.
#[derive(Debug, Default)]
pub struct LeastLoaded {
    claims: AtomicUsize,
    spread: AtomicUsize,
}

impl LeastLoaded {
    /// A least-loaded strategy.
    pub fn new() -> Self {
        Self::default()
    }
}

impl Strategy for LeastLoaded {
    fn pick(&self, candidates: &[MemberRecord], ctx: &PickContext<'_>) -> Option<usize> {
        let min = candidates.iter().map(|m| m.load).min()?;
        let tied = candidates.iter().filter(|m| m.load == min).count();
        let turn = cursor(&self.claims, &self.spread, ctx.purpose).fetch_add(1, Ordering::Relaxed);
        candidates
            .iter()
            .enumerate()
            .filter(|(_, m)| m.load == min)
            .map(|(i, _)| i)
            .nth(turn % tied)
    }

    fn uses_load(&self) -> bool {
        true
    }
}

/// Picks uniformly at random: zero-coordination sharding.
#[derive(Debug, Default, Clone, Copy)]
pub struct Random;

impl Strategy for Random {
    fn pick(&self, candidates: &[MemberRecord], _ctx: &PickContext<'_>) -> Option<usize> {
        if candidates.is_empty() {
            return None;
        }
        Some(rand::rng().random_range(0..candidates.len()))
    }
}

/// Runs `strategy` on `candidates`, ignoring out-of-range answers from user
/// strategies.
pub(crate) fn pick<'a>(
    strategy: &dyn Strategy,
    candidates: &'a [MemberRecord],
    ctx: &PickContext<'_>,
) -> Option<&'a MemberRecord> {
    if candidates.is_empty() {
        return None;
    }
    let index = strategy.pick(candidates, ctx)?;
    let picked = candidates.get(index);
    if picked.is_none() {
        tracing::warn!(
            index,
            len = candidates.len(),
            "strategy returned an out-of-range index"
        );
    }
    picked
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::record::test_member as member;
    use std::collections::HashMap;

    fn ctx() -> PickContext<'static> {
        PickContext {
            destination: None,
            purpose: PickPurpose::Request,
        }
    }

    #[test]
    fn round_robin_cycles_through_every_candidate() {
        let rr = RoundRobin::new();
        let c = [member("a", 0), member("b", 0), member("c", 0)];
        let picks: Vec<_> = (0..6).map(|_| rr.pick(&c, &ctx()).unwrap()).collect();
        assert_eq!(picks, [0, 1, 2, 0, 1, 2]);
        assert_eq!(rr.pick(&[], &ctx()), None);
    }

    #[test]
    fn least_loaded_picks_the_minimum() {
        let ll = LeastLoaded::new();
        let c = [member("a", 5), member("b", 1), member("c", 9)];
        for _ in 0..4 {
            assert_eq!(ll.pick(&c, &ctx()), Some(1));
        }
        assert!(ll.uses_load());
    }

    #[test]
    fn least_loaded_breaks_ties_round_robin() {
        let ll = LeastLoaded::new();
        let c = [member("a", 2), member("b", 7), member("c", 2)];
        let picks: Vec<_> = (0..4).map(|_| ll.pick(&c, &ctx()).unwrap()).collect();
        assert_eq!(picks, [0, 2, 0, 2]);
    }

    #[test]
    fn requests_do_not_move_the_claim_cursor() {
        let c = [member("a", 0), member("b", 0)];
        let claim = PickContext {
            destination: None,
            purpose: PickPurpose::FirstTouch,
        };
        for strategy in [&RoundRobin::new() as &dyn Strategy, &LeastLoaded::new()] {
            let mut claims = Vec::new();
            for i in 0..10 {
                claims.push(strategy.pick(&c, &claim).unwrap());
                for _ in 0..(i % 4) {
                    strategy.pick(&c, &ctx()).unwrap();
                }
            }
            assert_eq!(
                claims.iter().filter(|&&i| i == 0).count(),
                5,
                "{strategy:?}"
            );
        }
    }

    #[test]
    fn random_stays_in_range_and_reaches_every_candidate() {
        let c = [member("a", 0), member("b", 0), member("c", 0)];
        let mut seen = HashMap::new();
        for _ in 0..600 {
            *seen.entry(Random.pick(&c, &ctx()).unwrap()).or_insert(0) += 1;
        }
        assert_eq!(seen.len(), 3);
        assert!(seen.keys().all(|&i| i < 3));
    }

    #[derive(Debug)]
    struct Dedicated;
    impl Strategy for Dedicated {
        fn pick(&self, c: &[MemberRecord], ctx: &PickContext<'_>) -> Option<usize> {
            match ctx.destination.map(|d| d.as_str()) {
                Some("vip") => c.iter().position(|m| m.id.as_str() == "big"),
                _ => Some(0),
            }
        }
    }

    #[test]
    fn custom_strategy_receives_the_destination() {
        let c = [member("a", 0), member("big", 0)];
        let vip = DestinationId::new("vip").unwrap();
        let other = DestinationId::new("other").unwrap();
        let pick_for = |d| {
            pick(
                &Dedicated,
                &c,
                &PickContext {
                    destination: Some(d),
                    purpose: PickPurpose::FirstTouch,
                },
            )
            .map(|m| m.id.as_str().to_owned())
        };
        assert_eq!(pick_for(&vip).as_deref(), Some("big"));
        assert_eq!(pick_for(&other).as_deref(), Some("a"));
    }

    #[derive(Debug)]
    struct OutOfRange;
    impl Strategy for OutOfRange {
        fn pick(&self, _: &[MemberRecord], _: &PickContext<'_>) -> Option<usize> {
            Some(99)
        }
    }

    #[test]
    fn out_of_range_answers_are_refused() {
        assert!(pick(&OutOfRange, &[member("a", 0)], &ctx()).is_none());
    }
}
