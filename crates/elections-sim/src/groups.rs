//! Locks and cluster sizes of a VVM seed: one or two locks whose names
//! share prefixes (and are other locks' record names under the old key
//! layout), and contenders started with different `--cluster-size`s
//! within one lock. The checker adds one rule: two leaderships of one lock
//! started with different sizes never overlap in time.

use std::time::Duration;

use crate::{history::Interval, rng::SimRng};

/// Lock names that share prefixes: each is another's record name under
/// the layout before issue 34 (`NAME/size`, `NAME/handover/i`,
/// `NAME/handover-bell/i`, `NAME/i`).
const NAMES: [&str; 6] = [
    "a",
    "a/1",
    "a/size",
    "a/handover",
    "a/handover-bell",
    "vvm/leader",
];

/// The largest cluster size a contender is started with.
pub(crate) const MAX_SIZE: u32 = 2;

/// What group a leadership belongs to: its lock and the cluster size its
/// node was started with.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct Group {
    /// The lock (an index into the seed's locks).
    pub lock: usize,
    /// The node's cluster size.
    pub size: u32,
}

/// One lock of a seed.
#[derive(Debug, Clone)]
pub(crate) struct Lock {
    /// Its key prefix (`NAME/`).
    pub(crate) prefix: String,
}

/// The locks of a VVM seed and each contender's lock and size.
#[derive(Debug, Clone)]
pub(crate) struct Plan {
    pub(crate) locks: Vec<Lock>,
    /// Per contender.
    pub(crate) groups: Vec<Group>,
}

impl Plan {
    /// Draws the plan of `contenders` nodes: one lock, or two sharing a
    /// prefix; every node of a lock with size 1 or 2 (mixed in about half
    /// the locks).
    pub(crate) fn draw(rng: &mut SimRng, contenders: usize) -> Plan {
        let count = if contenders >= 4 && rng.chance(0.5) {
            2
        } else {
            1
        };
        let first = rng.below(NAMES.len() as u64) as usize;
        let mut names = vec![NAMES[first]];
        if count == 2 {
            let second = (first + 1 + rng.below(NAMES.len() as u64 - 1) as usize) % NAMES.len();
            names.push(NAMES[second]);
        }
        let locks = names
            .iter()
            .map(|name| Lock {
                prefix: format!("{name}/"),
            })
            .collect();
        let mixed: Vec<bool> = (0..count).map(|_| rng.chance(0.5)).collect();
        let uniform: Vec<u32> = (0..count)
            .map(|_| 1 + rng.below(u64::from(MAX_SIZE)) as u32)
            .collect();
        let groups = (0..contenders)
            .map(|c| {
                let lock = c % count;
                let size = if mixed[lock] {
                    1 + rng.below(u64::from(MAX_SIZE)) as u32
                } else {
                    uniform[lock]
                };
                Group { lock, size }
            })
            .collect();
        Plan { locks, groups }
    }

    /// Every lease key of every lock (indexes up to the largest size).
    pub(crate) fn keys(&self) -> Vec<String> {
        let mut keys = Vec::new();
        for lock in &self.locks {
            for index in 1..=MAX_SIZE {
                keys.push(format!("{}{index}", lock.prefix));
            }
        }
        keys
    }

    /// What must have a leader again once the faults stop, as sets of
    /// keys of which one must: every key of a lock whose nodes share a
    /// size, and any one key of a lock of mixed sizes (the size holding
    /// the claim may lead a key the other size's nodes cannot help with:
    /// they are refused, by design).
    pub(crate) fn liveness(&self) -> Vec<Vec<String>> {
        let mut sets = Vec::new();
        for (l, lock) in self.locks.iter().enumerate() {
            let sizes: Vec<u32> = self
                .groups
                .iter()
                .filter(|g| g.lock == l)
                .map(|g| g.size)
                .collect();
            let keys = |n: u32| (1..=n).map(|i| format!("{}{i}", lock.prefix));
            match sizes.iter().min() {
                Some(&min) if sizes.iter().all(|s| *s == min) => {
                    sets.extend(keys(min).map(|key| vec![key]));
                }
                _ => sets.push(keys(MAX_SIZE).collect()),
            }
        }
        sets
    }

    /// True when some lock's nodes were started with different sizes.
    pub(crate) fn mixed(&self) -> bool {
        (0..self.locks.len()).any(|l| {
            let mut sizes = self.groups.iter().filter(|g| g.lock == l).map(|g| g.size);
            let first = sizes.next();
            sizes.any(|s| Some(s) != first)
        })
    }
}

/// Pairs of leaderships of one lock, started with different cluster sizes,
/// that overlapped in time (must be empty).
pub fn size_overlaps(intervals: &[Interval]) -> Vec<(Interval, Interval)> {
    let mut found = Vec::new();
    for (i, a) in intervals.iter().enumerate() {
        let Some(ga) = a.group else { continue };
        for b in &intervals[i + 1..] {
            let Some(gb) = b.group else { continue };
            if ga.lock != gb.lock || ga.size == gb.size {
                continue;
            }
            let a_end = a.end.unwrap_or(Duration::MAX);
            let b_end = b.end.unwrap_or(Duration::MAX);
            if a.start < b_end && b.start < a_end {
                found.push((a.clone(), b.clone()));
            }
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::history::{EndCause, Who};

    fn iv(lock: usize, size: u32, start: u64, end: u64) -> Interval {
        Interval {
            key: format!("l{lock}/1"),
            who: Who {
                contender: size as usize,
                incarnation: 0,
            },
            token: 1,
            start: Duration::from_secs(start),
            end: Some(Duration::from_secs(end)),
            cause: Some(EndCause::Stopped),
            group: Some(Group { lock, size }),
        }
    }

    #[test]
    fn sizes_of_one_lock_never_overlap_and_locks_are_independent() {
        assert!(size_overlaps(&[iv(0, 1, 0, 10), iv(0, 2, 10, 20)]).is_empty());
        assert!(size_overlaps(&[iv(0, 1, 0, 10), iv(0, 1, 5, 20)]).is_empty());
        assert!(size_overlaps(&[iv(0, 1, 0, 10), iv(1, 2, 5, 20)]).is_empty());
        assert_eq!(size_overlaps(&[iv(0, 1, 0, 10), iv(0, 2, 9, 20)]).len(), 1);
    }

    #[test]
    fn plans_share_prefixes_and_mix_sizes() {
        let mut rng = SimRng::new(7);
        let (mut two, mut mixed) = (0, 0);
        for _ in 0..200 {
            let plan = Plan::draw(&mut rng, 5);
            two += usize::from(plan.locks.len() == 2);
            mixed += usize::from(plan.mixed());
            assert!(
                plan.locks
                    .iter()
                    .all(|l| l.prefix.starts_with("a/") || l.prefix == "vvm/leader/")
            );
            assert!(!plan.liveness().is_empty());
        }
        assert!(
            two > 50 && mixed > 50,
            "{two} with two locks, {mixed} mixed"
        );
    }
}
