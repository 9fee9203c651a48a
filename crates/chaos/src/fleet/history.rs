//! What pods record about the calls they served and refused, and the check
//! that no destination was served by two pods at once.
//!
//! Each `chaos-pod` process appends one line per call to its own history
//! file, in one `write` so a SIGKILL never leaves half a line behind (a
//! torn last line is skipped by [`parse_history`] anyway):
//!
//! ```text
//! served <destination> <pod> <epoch> <start_us> <end_us>
//! refused <destination> <pod> <epoch> <t_us>
//! ```
//!
//! Times are microseconds since the Unix epoch (`SystemTime`, one host: every
//! process reads the same clock, so they compare across processes).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::time::{SystemTime, UNIX_EPOCH};

/// One line of a pod's history.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Entry {
    /// The pod ran the call's handler from `start_us` to `end_us` and kept
    /// its result (the call was served).
    Served(Served),
    /// The pod refused a routed call as a stale owner (421 `stale_owner`):
    /// the ownership fence, or the handler's own re-check before it kept
    /// its result.
    Refused {
        /// The destination the call was routed for.
        destination: String,
        /// The refusing pod.
        pod: String,
        /// The epoch the call carried.
        epoch: u64,
        /// When it was refused.
        t_us: u64,
    },
}

/// A call a pod served.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Served {
    /// The destination.
    pub destination: String,
    /// The serving pod (one id per process: a restarted pod is a new one).
    pub pod: String,
    /// The epoch the call was routed with (0 without fence headers).
    pub epoch: u64,
    /// When the handler started.
    pub start_us: u64,
    /// When the handler's work ended.
    pub end_us: u64,
}

impl Entry {
    /// The line for a history file (no newline).
    pub fn to_line(&self) -> String {
        match self {
            Entry::Served(s) => format!(
                "served {} {} {} {} {}",
                s.destination, s.pod, s.epoch, s.start_us, s.end_us
            ),
            Entry::Refused {
                destination,
                pod,
                epoch,
                t_us,
            } => format!("refused {destination} {pod} {epoch} {t_us}"),
        }
    }

    /// Parses a line written by [`Entry::to_line`]; `None` if malformed.
    pub fn parse(line: &str) -> Option<Entry> {
        let parts: Vec<&str> = line.split_whitespace().collect();
        let num = |i: usize| parts.get(i).and_then(|p| p.parse::<u64>().ok());
        match parts.first().copied() {
            Some("served") if parts.len() == 6 => Some(Entry::Served(Served {
                destination: parts[1].to_owned(),
                pod: parts[2].to_owned(),
                epoch: num(3)?,
                start_us: num(4)?,
                end_us: num(5)?,
            })),
            Some("refused") if parts.len() == 5 => Some(Entry::Refused {
                destination: parts[1].to_owned(),
                pod: parts[2].to_owned(),
                epoch: num(3)?,
                t_us: num(4)?,
            }),
            _ => None,
        }
    }
}

/// The entries of a history file's text; malformed lines (a torn last
/// line) are counted in the second value, not returned.
pub fn parse_history(text: &str) -> (Vec<Entry>, usize) {
    let mut bad = 0;
    let entries = text
        .lines()
        .filter(|l| !l.trim().is_empty())
        .filter_map(|l| {
            let e = Entry::parse(l);
            bad += usize::from(e.is_none());
            e
        })
        .collect();
    (entries, bad)
}

/// Microseconds since the Unix epoch by the wall clock.
pub fn now_us() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map(|d| u64::try_from(d.as_micros()).unwrap_or(u64::MAX))
        .unwrap_or(0)
}

/// Two calls of one destination served by different pods in overlapping
/// intervals.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Overlap {
    /// The destination.
    pub destination: String,
    /// The call that started first (or the one whose interval the later
    /// call fell into).
    pub earlier: Served,
    /// The call that started while `earlier` was running.
    pub later: Served,
}

impl fmt::Display for Overlap {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}: {} (epoch {}) served {}..{} us while {} (epoch {}) served {}..{} us",
            self.destination,
            self.later.pod,
            self.later.epoch,
            self.later.start_us,
            self.later.end_us,
            self.earlier.pod,
            self.earlier.epoch,
            self.earlier.start_us,
            self.earlier.end_us
        )
    }
}

/// What the history shows.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct HistoryReport {
    /// Calls served (fanned-out destinations included).
    pub served: u64,
    /// Calls refused as a stale owner (fence or the handler's re-check).
    pub refused: u64,
    /// Changes of the serving pod of a destination that is not fanned out,
    /// in the order calls started: failovers (and reassignments after a
    /// pod's lease ran out).
    pub failovers: u64,
    /// Served calls that started while another pod was serving the same
    /// destination (fanned-out destinations excluded): must be 0.
    pub overlapping: u64,
    /// The first overlaps found (at most [`MAX_OVERLAPS_KEPT`]).
    pub overlaps: Vec<Overlap>,
}

/// How many overlaps a [`HistoryReport`] keeps for display.
pub const MAX_OVERLAPS_KEPT: usize = 10;

/// Checks `entries` (every pod's history): no destination for which
/// `fanned` is false was served by two different pods at once (intervals
/// `[start_us, end_us]` that intersect; touching ends count as
/// overlapping).
///
/// ```
/// use chaos::fleet::history::{check_history, Entry, Served};
///
/// let served = |pod: &str, start_us, end_us| Entry::Served(Served {
///     destination: "d1".into(), pod: pod.into(), epoch: 1, start_us, end_us,
/// });
/// // pod b starts while pod a still serves d1
/// let report = check_history(&[served("a", 0, 100), served("b", 50, 150)], |_| false);
/// assert_eq!(report.overlapping, 1);
/// // unless d1 is fanned out (shared on purpose)
/// assert_eq!(check_history(&[served("a", 0, 100), served("b", 50, 150)], |_| true).overlapping, 0);
/// ```
pub fn check_history(entries: &[Entry], fanned: impl Fn(&str) -> bool) -> HistoryReport {
    let mut report = HistoryReport::default();
    let mut by_dest: BTreeMap<&str, Vec<&Served>> = BTreeMap::new();
    for entry in entries {
        match entry {
            Entry::Served(s) => {
                report.served += 1;
                if !fanned(&s.destination) {
                    by_dest.entry(&s.destination).or_default().push(s);
                }
            }
            Entry::Refused { .. } => report.refused += 1,
        }
    }
    for (dest, mut calls) in by_dest {
        calls.sort_by_key(|s| (s.start_us, s.end_us));
        // the call of each pod that ends last among those started so far
        let mut latest: HashMap<&str, &Served> = HashMap::new();
        let mut owner: Option<&str> = None;
        for call in calls {
            if owner.is_some_and(|o| o != call.pod) {
                report.failovers += 1;
            }
            owner = Some(&call.pod);
            let clash = latest
                .iter()
                .filter(|(pod, other)| **pod != call.pod && other.end_us >= call.start_us)
                .map(|(_, other)| *other)
                .min_by_key(|other| other.start_us);
            if let Some(other) = clash {
                report.overlapping += 1;
                if report.overlaps.len() < MAX_OVERLAPS_KEPT {
                    report.overlaps.push(Overlap {
                        destination: dest.to_owned(),
                        earlier: other.clone(),
                        later: call.clone(),
                    });
                }
            }
            let slot = latest.entry(&call.pod).or_insert(call);
            if call.end_us > slot.end_us {
                *slot = call;
            }
        }
    }
    report
}

#[cfg(test)]
mod tests {
    use super::*;

    fn served(dest: &str, pod: &str, start_us: u64, end_us: u64) -> Entry {
        Entry::Served(Served {
            destination: dest.into(),
            pod: pod.into(),
            epoch: 1,
            start_us,
            end_us,
        })
    }

    #[test]
    fn lines_round_trip_and_torn_lines_are_skipped() {
        let entries = vec![
            served("d1", "p0.1", 10, 20),
            Entry::Refused {
                destination: "d1".into(),
                pod: "p1.1".into(),
                epoch: 4,
                t_us: 30,
            },
        ];
        let mut text: String = entries.iter().map(|e| e.to_line() + "\n").collect();
        text.push_str("served d1 p0.1 1 4");
        let (parsed, bad) = parse_history(&text);
        assert_eq!(parsed, entries);
        assert_eq!(bad, 1);
    }

    #[test]
    fn the_checker_flags_two_pods_serving_one_destination_at_once() {
        // b's call starts inside a's, even though a's started much earlier
        // and another of a's calls ended before
        let history = vec![
            served("d1", "a", 0, 10),
            served("d1", "a", 20, 500),
            served("d1", "b", 400, 450),
            served("d1", "a", 600, 700),
            // another destination, sequential handover: fine
            served("d2", "a", 0, 100),
            served("d2", "b", 101, 200),
        ];
        let report = check_history(&history, |_| false);
        assert_eq!(report.overlapping, 1, "{report:?}");
        assert_eq!(report.overlaps[0].later.pod, "b");
        assert_eq!(report.overlaps[0].earlier.start_us, 20);
        // a -> b -> a on d1, a -> b on d2
        assert_eq!(report.failovers, 3);
        assert_eq!(report.served, 6);
    }

    #[test]
    fn the_same_pod_may_serve_a_destination_concurrently() {
        let history = vec![served("d1", "a", 0, 100), served("d1", "a", 50, 150)];
        assert_eq!(check_history(&history, |_| false).overlapping, 0);
    }

    #[test]
    fn an_overlap_is_found_whichever_pod_started_first_and_touching_ends_count() {
        let history = vec![served("d1", "b", 100, 200), served("d1", "a", 0, 100)];
        assert_eq!(check_history(&history, |_| false).overlapping, 1);
        let history = vec![served("d1", "b", 101, 200), served("d1", "a", 0, 100)];
        assert_eq!(check_history(&history, |_| false).overlapping, 0);
    }

    #[test]
    fn fanned_destinations_are_excluded() {
        let history = vec![
            served("fan-0", "a", 0, 100),
            served("fan-0", "b", 50, 150),
            served("d1", "a", 0, 100),
            served("d1", "b", 50, 150),
        ];
        let report = check_history(&history, |d| d.starts_with("fan-"));
        assert_eq!(report.overlapping, 1);
        assert_eq!(report.overlaps[0].destination, "d1");
        assert_eq!(report.served, 4);
    }
}
