//! Priority seeds: what the contenders' candidacies and preemptions were,
//! and the checks that judge them (issue 38).
//!
//! The history of a priority seed holds, besides the leaderships, every
//! **stand** (one candidacy: its id, its contender's priority, from the
//! moment the standby was made until it was dropped, took the key, or its
//! process died) and every **preemption** (a hand-over whose cause is
//! priority: the leader decided at `at` that a higher candidate was due,
//! and the hand-over to it succeeded). Hand-overs for other causes (a
//! leader stepping down by choice) are not preemptions and are not
//! recorded here. The checker holds the preemptions to the rules:
//!
//! - **tenure**: the leader had led for its minimum tenure (its leadership
//!   interval began at least `min_tenure` before the decision): at most
//!   one preemption per tenure;
//! - **hold-down**: the candidacy handed to had stood for the hold-down
//!   before the decision, and it is not a flapper's (every stand of a
//!   flapper is shorter than the hold-down, its record's lingering
//!   included);
//! - **strictly higher**: the successor's priority is above the leader's
//!   (equal priorities never preempt);
//! - **liveness**: after the faults stopped, a candidacy that stood
//!   continuously saw someone of its priority or higher lead within one
//!   lease of being due: after the hold-down, and after what was left of
//!   the lower leader's minimum tenure (a lower leader that took over while
//!   it stood counts the hold-down from its own start).

use std::{collections::BTreeMap, fmt, time::Duration};

use crate::{
    history::{Interval, Who},
    rng::SimRng,
};

/// A deliberate bug in the priority contenders' preemption, to show that
/// the checks catch it (never set outside those tests).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PreemptionBug {
    /// Hold-down zero: a higher candidate is due as soon as it is listed.
    NoHoldDown,
    /// Minimum tenure zero: a leader may be preempted as soon as it leads.
    NoMinTenure,
    /// The leader counts its own priority one lower: equals preempt.
    EqualsPreempt,
    /// The leader never looks for a higher candidate.
    NeverPreempt,
}

impl PreemptionBug {
    /// Every bug.
    pub const ALL: [PreemptionBug; 4] = [
        PreemptionBug::NoHoldDown,
        PreemptionBug::NoMinTenure,
        PreemptionBug::EqualsPreempt,
        PreemptionBug::NeverPreempt,
    ];

    /// Its name on the command line.
    pub fn name(self) -> &'static str {
        match self {
            PreemptionBug::NoHoldDown => "no-hold-down",
            PreemptionBug::NoMinTenure => "no-min-tenure",
            PreemptionBug::EqualsPreempt => "equals-preempt",
            PreemptionBug::NeverPreempt => "never-preempt",
        }
    }
}

/// The priority plan of one seed.
#[derive(Debug, Clone)]
pub(crate) struct PrioritySpec {
    /// Each contender's priority.
    pub(crate) priorities: Vec<i32>,
    /// Contenders whose every stand is short (a flapper).
    pub(crate) flappers: Vec<bool>,
    /// The hold-down every leader applies.
    pub(crate) hold_down: Duration,
    /// The minimum tenure every leader applies.
    pub(crate) min_tenure: Duration,
}

impl PrioritySpec {
    /// Priorities 0..=2 (so some equal, some higher), a third of the
    /// contenders flappers, the default hold-down (two leases), a minimum
    /// tenure between one lease and four (a new leader counts every
    /// hold-down from its own first listing, so only a tenure longer than
    /// the hold-down ever holds a preemption back).
    pub(crate) fn draw(rng: &mut SimRng, contenders: usize, d: Duration) -> Self {
        let priorities = (0..contenders).map(|_| rng.below(3) as i32).collect();
        let flappers = (0..contenders).map(|_| rng.chance(0.35)).collect();
        let hold_down = elections::Preemption::default_hold_down(d);
        let min_tenure = rng.between(d, d * 4);
        PrioritySpec {
            priorities,
            flappers,
            hold_down,
            min_tenure,
        }
    }

    /// The plan of a VVM seed: as [`draw`](Self::draw), but every VVM's
    /// priority distinct (a shuffle of `0..contenders`). The VVMs' monitor
    /// takes the first candidate due in the library's order, which breaks
    /// ties of priority by the wall-clock `since` of the records: with
    /// equal priorities due at once, the successor would depend on the
    /// machine and the run would not replay. (Equal priorities are covered
    /// by the bare-elections seeds, whose contenders order by id.)
    pub(crate) fn draw_distinct(rng: &mut SimRng, contenders: usize, d: Duration) -> Self {
        let mut spec = Self::draw(rng, contenders, d);
        let mut order: Vec<i32> = (0..contenders as i32).collect();
        for i in (1..order.len()).rev() {
            order.swap(i, rng.below(i as u64 + 1) as usize);
        }
        spec.priorities = order;
        spec
    }

    /// What the request checker holds VVM preemption markers to.
    pub(crate) fn marker_rules(&self) -> crate::markers::MarkerRules {
        crate::markers::MarkerRules {
            priorities: self.priorities.clone(),
            hold_down: self.hold_down,
            min_tenure: self.min_tenure,
        }
    }

    /// How long one stand lasts unless it takes the key: a flapper's is
    /// shorter than a third of a lease, so its record (lingering half a
    /// lease, or reappearing by a write applied up to a lease late) is never
    /// listed for the hold-down of two leases; a steady one's outlasts the
    /// hold-down and a lease.
    pub(crate) fn stand_length(&self, rng: &mut SimRng, c: usize, d: Duration) -> Duration {
        if self.flappers[c] {
            rng.between(d / 10, d / 3)
        } else {
            rng.between(self.hold_down + d, d * 8)
        }
    }
}

/// One candidacy of a priority contender.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Stand {
    /// Whose candidacy.
    pub who: Who,
    /// The candidacy's id (what a hand-over names).
    pub id: String,
    /// Its priority.
    pub priority: i32,
    /// True when its contender is a flapper.
    pub flapper: bool,
    /// When the standby was made, from the run's start.
    pub start: Duration,
    /// When it was dropped, took the key, or died (`None` while standing).
    pub end: Option<Duration>,
    /// True when it ended by taking the key.
    pub acquired: bool,
}

/// One preemption: a hand-over whose cause is priority, that succeeded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Preempted {
    /// The key.
    pub key: String,
    /// The leader that handed over.
    pub from: Who,
    /// Its priority.
    pub from_priority: i32,
    /// When its leadership interval began.
    pub tenure_start: Duration,
    /// The candidacy it handed over to.
    pub to: String,
    /// When the leader decided the candidate was due.
    pub at: Duration,
}

impl fmt::Display for Preempted {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {} c{}/i{} (priority {}, leading since {:.3}s) preempted at {:.3}s by candidacy {}",
            self.key,
            self.from.contender,
            self.from.incarnation,
            self.from_priority,
            self.tenure_start.as_secs_f64(),
            self.at.as_secs_f64(),
            self.to
        )
    }
}

/// The stands and preemptions of a priority seed.
#[derive(Debug, Default)]
pub(crate) struct PriorityLog {
    pub(crate) stands: Vec<Stand>,
    /// The open stand of each contender, by index into `stands`.
    open: BTreeMap<usize, usize>,
    pub(crate) preemptions: Vec<Preempted>,
}

impl PriorityLog {
    /// A stand begins.
    pub(crate) fn begin(&mut self, stand: Stand) {
        self.end(stand.who.contender, stand.start, false);
        self.open.insert(stand.who.contender, self.stands.len());
        self.stands.push(stand);
    }

    /// The open stand of `contender` (if any) ends at `at`.
    pub(crate) fn end(&mut self, contender: usize, at: Duration, acquired: bool) {
        if let Some(idx) = self.open.remove(&contender)
            && let Some(stand) = self.stands.get_mut(idx)
        {
            stand.end = Some(at);
            stand.acquired = acquired;
        }
    }
}

/// What the preemption checks found (every list must be empty).
#[derive(Debug, Default, Clone)]
pub struct PreemptionVerdict {
    /// Preemptions counted.
    pub preemptions: usize,
    /// Stands held to the liveness bound.
    pub liveness_checked: usize,
    /// Preempted within the leader's minimum tenure.
    pub within_tenure: Vec<String>,
    /// Handed to a candidacy that had not stood for the hold-down, or to
    /// a flapper's.
    pub without_hold_down: Vec<String>,
    /// Handed to a candidacy of a priority not above the leader's.
    pub not_higher: Vec<String>,
    /// A candidacy that stood continuously after the faults stopped saw
    /// nobody of its priority or higher lead within the hold-down (or what
    /// was left of the minimum tenure of a lower leader that took over
    /// while it stood, if later) and a lease.
    pub too_slow: Vec<String>,
}

impl PreemptionVerdict {
    /// True when every check held.
    pub fn passed(&self) -> bool {
        self.within_tenure.is_empty()
            && self.without_hold_down.is_empty()
            && self.not_higher.is_empty()
            && self.too_slow.is_empty()
    }

    /// Adds `other`'s counts and findings to `self`.
    pub fn add(&mut self, other: &PreemptionVerdict) {
        self.preemptions += other.preemptions;
        self.liveness_checked += other.liveness_checked;
        self.within_tenure.extend_from_slice(&other.within_tenure);
        self.without_hold_down
            .extend_from_slice(&other.without_hold_down);
        self.not_higher.extend_from_slice(&other.not_higher);
        self.too_slow.extend_from_slice(&other.too_slow);
    }
}

/// Checks the preemptions and the liveness bound of a priority seed whose
/// faults stopped at `healed_at` and which ended at `end`.
pub(crate) fn check(
    log: &PriorityLog,
    spec: &PrioritySpec,
    intervals: &[Interval],
    healed_at: Duration,
    end: Duration,
    d: Duration,
) -> PreemptionVerdict {
    let mut verdict = PreemptionVerdict {
        preemptions: log.preemptions.len(),
        ..PreemptionVerdict::default()
    };
    for p in &log.preemptions {
        if p.at < p.tenure_start + spec.min_tenure {
            verdict.within_tenure.push(format!(
                "{p}: within its minimum tenure of {:?}",
                spec.min_tenure
            ));
        }
        // The stand that was handed to: the latest with that id begun
        // before the decision.
        let stand = log
            .stands
            .iter()
            .filter(|s| s.id == p.to && s.start <= p.at)
            .max_by_key(|s| s.start);
        let Some(stand) = stand else {
            verdict
                .without_hold_down
                .push(format!("{p}: a candidacy that never stood"));
            continue;
        };
        if stand.start + spec.hold_down > p.at || stand.flapper {
            verdict.without_hold_down.push(format!(
                "{p}: it stood from {:.3}s ({}), hold-down {:?}",
                stand.start.as_secs_f64(),
                if stand.flapper { "a flapper" } else { "steady" },
                spec.hold_down
            ));
        }
        if stand.priority <= p.from_priority {
            verdict.not_higher.push(format!(
                "{p}: its priority {} is not above {}",
                stand.priority, p.from_priority
            ));
        }
    }
    let priority_of = |iv: &Interval| spec.priorities.get(iv.who.contender).copied().unwrap_or(0);
    for s in &log.stands {
        // Due once it has stood for the hold-down and the lower leader of
        // that moment has led for its minimum tenure; a lower leader that
        // took over while it stood (named by a hand-over by choice, before
        // it was due or before it took the key) sees it, and counts its
        // hold-down, only from then. Then a lease. (Intervals are in order
        // of start.)
        let mut due = s.start + spec.hold_down;
        for iv in intervals {
            if priority_of(iv) < s.priority
                && iv.start < due + d
                && iv.end.is_none_or(|e| e > s.start)
            {
                let counts_from_then = if iv.start > s.start {
                    spec.hold_down.max(spec.min_tenure)
                } else {
                    spec.min_tenure
                };
                due = due.max(iv.start + counts_from_then);
            }
        }
        let deadline = due + d;
        let continuous = s.acquired || s.end.is_none_or(|e| e >= deadline);
        if s.start < healed_at || deadline > end || !continuous {
            continue;
        }
        verdict.liveness_checked += 1;
        let served = intervals.iter().any(|iv| {
            priority_of(iv) >= s.priority
                && iv.start <= deadline
                && iv.end.is_none_or(|e| e > s.start)
        });
        if !served {
            verdict.too_slow.push(format!(
                "c{}/i{} (priority {}) stood from {:.3}s, yet nobody of its priority or higher led by {:.3}s",
                s.who.contender,
                s.who.incarnation,
                s.priority,
                s.start.as_secs_f64(),
                deadline.as_secs_f64()
            ));
        }
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::EndCause;

    const S: Duration = Duration::from_secs(1);

    fn who(c: usize) -> Who {
        Who {
            contender: c,
            incarnation: 0,
        }
    }

    fn spec() -> PrioritySpec {
        PrioritySpec {
            priorities: vec![0, 1, 1],
            flappers: vec![false, false, true],
            hold_down: 40 * S,
            min_tenure: 30 * S,
        }
    }

    fn stand(c: usize, id: &str, start: u32, end: Option<u32>) -> Stand {
        let spec = spec();
        Stand {
            who: who(c),
            id: id.into(),
            priority: spec.priorities[c],
            flapper: spec.flappers[c],
            start: start * S,
            end: end.map(|e| e * S),
            acquired: false,
        }
    }

    fn leader(c: usize, start: u32, end: u32) -> Interval {
        Interval {
            key: "k".into(),
            who: who(c),
            token: u64::from(start),
            start: start * S,
            end: Some(end * S),
            cause: Some(EndCause::Stopped),
            group: None,
        }
    }

    fn preempted(from: usize, tenure: u32, to: &str, at: u32) -> Preempted {
        Preempted {
            key: "k".into(),
            from: who(from),
            from_priority: spec().priorities[from],
            tenure_start: tenure * S,
            to: to.into(),
            at: at * S,
        }
    }

    #[test]
    fn each_rule_is_held() {
        let mut log = PriorityLog::default();
        log.begin(stand(1, "b", 10, None));
        log.begin(stand(2, "c", 50, Some(55)));
        log.preemptions.push(preempted(0, 0, "b", 50));
        let ok = check(
            &log,
            &spec(),
            &[leader(0, 0, 51)],
            Duration::ZERO,
            60 * S,
            20 * S,
        );
        assert!(ok.passed(), "{ok:?}");
        // Within tenure, before the hold-down, to a flapper, to an equal.
        log.preemptions.push(preempted(0, 40, "b", 45));
        log.preemptions.push(preempted(1, 0, "c", 52));
        let bad = check(&log, &spec(), &[], 100 * S, 100 * S, 20 * S);
        assert_eq!(bad.within_tenure.len(), 1, "{bad:?}");
        assert_eq!(bad.without_hold_down.len(), 2, "{bad:?}");
        assert_eq!(bad.not_higher.len(), 1, "{bad:?}");
    }

    #[test]
    fn a_steady_higher_candidate_must_lead_within_the_bound() {
        let mut log = PriorityLog::default();
        log.begin(stand(1, "b", 10, None));
        // The lower one led on past 10 + 40 + 20 s.
        let slow = check(&log, &spec(), &[leader(0, 0, 80)], 5 * S, 90 * S, 20 * S);
        assert_eq!((slow.liveness_checked, slow.too_slow.len()), (1, 1));
        let fast = check(
            &log,
            &spec(),
            &[leader(0, 0, 55), leader(1, 56, 90)],
            5 * S,
            90 * S,
            20 * S,
        );
        assert!(fast.passed(), "{fast:?}");
        // Faults until 20 s: not held to the bound.
        let faulty = check(&log, &spec(), &[leader(0, 0, 80)], 20 * S, 90 * S, 20 * S);
        assert_eq!(faulty.liveness_checked, 0);
    }
}
