//! Overlapping acting intervals: a leader that still acted after another
//! process had acquired the lease.
//!
//! A non-zombie contender acts by writing to the guarded resource. If it
//! *starts* a write with token `t` after another process reported the
//! acquisition of a higher token, two processes acted at once: mutual
//! exclusion broke for that while, whatever the fencing token then did to
//! the write. Exempt, as in [`crate::clock::acting_past_lease`]: zombies
//! (they act late on purpose), and a process the harness SIGSTOPped, from
//! the SIGSTOP until its next successful renewal (what a pause does is
//! what fencing tokens are for).
//!
//! ```
//! use chaos::{check::overlap::overlaps, event::{Event, Record, WriteOutcome}};
//!
//! let write = |start_ms, token| Event::Write { start_ms, token, outcome: WriteOutcome::Failed };
//! let history = vec![
//!     Record::new(1_000, "c0.1", Event::Acquired { token: 1 }),
//!     Record::new(2_000, "c1.1", Event::Acquired { token: 2 }),
//!     Record::new(2_300, "c0.1", write(2_250, 1)),
//! ];
//! let found = overlaps(&history);
//! assert_eq!(found.len(), 1);
//! assert_eq!(found[0].length_ms(), 250);
//! ```

use std::collections::HashMap;

use crate::event::{Event, Record};

/// One leader acting after a successor's acquisition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Overlap {
    /// The process that went on acting.
    pub holder: String,
    /// The token it acted with.
    pub token: u64,
    /// The process that had acquired meanwhile.
    pub successor: String,
    /// Its (higher) token.
    pub successor_token: u64,
    /// When the successor reported its acquisition (ms).
    pub acquired_ms: u64,
    /// The start of the holder's last write after that (ms).
    pub last_write_ms: u64,
}

impl Overlap {
    /// How long both acted: from the successor's acquisition to the
    /// holder's last write start.
    pub fn length_ms(&self) -> u64 {
        self.last_write_ms.saturating_sub(self.acquired_ms)
    }
}

impl std::fmt::Display for Overlap {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "{} (token {}) acted until {}, {} ms after {} acquired token {} at {}",
            self.holder,
            self.token,
            self.last_write_ms,
            self.length_ms(),
            self.successor,
            self.successor_token,
            self.acquired_ms
        )
    }
}

/// Every overlap in `history` (any order), one per holder's token and
/// successor's acquisition, in the order the acquisitions happened.
pub fn overlaps(history: &[Record]) -> Vec<Overlap> {
    let mut records: Vec<&Record> = history.iter().collect();
    records.sort_by_key(|r| r.t_ms);
    let acquisitions: Vec<(u64, &str, u64)> = records
        .iter()
        .filter_map(|r| match r.event {
            Event::Acquired { token } => Some((r.t_ms, r.proc.as_str(), token)),
            _ => None,
        })
        .collect();
    // Per process: the intervals in which it is exempt (SIGSTOP to its
    // next successful renewal; open-ended if none came).
    let mut exempt: HashMap<&str, Vec<(u64, u64)>> = HashMap::new();
    let mut stopped: HashMap<&str, u64> = HashMap::new();
    for r in &records {
        match r.event {
            Event::SigStop => {
                stopped.entry(r.proc.as_str()).or_insert(r.t_ms);
            }
            Event::Armed { success: true, .. } => {
                if let Some(from) = stopped.remove(r.proc.as_str()) {
                    exempt.entry(&r.proc).or_default().push((from, r.t_ms));
                }
            }
            _ => {}
        }
    }
    for (proc, from) in stopped {
        exempt.entry(proc).or_default().push((from, u64::MAX));
    }
    let mut found: Vec<Overlap> = Vec::new();
    for r in &records {
        let Event::Write {
            start_ms, token, ..
        } = r.event
        else {
            continue;
        };
        if !r.proc.starts_with('c') {
            continue;
        }
        let paused = exempt
            .get(r.proc.as_str())
            .is_some_and(|spans| spans.iter().any(|(a, b)| (*a..*b).contains(&start_ms)));
        if paused {
            continue;
        }
        let Some(&(acquired_ms, successor, successor_token)) = acquisitions
            .iter()
            .find(|(t, p, tok)| *t < start_ms && *p != r.proc && *tok > token)
        else {
            continue;
        };
        match found
            .iter_mut()
            .find(|o| o.holder == r.proc && o.token == token && o.acquired_ms == acquired_ms)
        {
            Some(o) => o.last_write_ms = o.last_write_ms.max(start_ms),
            None => found.push(Overlap {
                holder: r.proc.clone(),
                token,
                successor: successor.to_string(),
                successor_token,
                acquired_ms,
                last_write_ms: start_ms,
            }),
        }
    }
    found.sort_by_key(|o| (o.acquired_ms, o.last_write_ms));
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::{
        event::WriteOutcome,
        test_support::{accepted_write, renewed},
    };

    fn write(start: u64, token: u64) -> Event {
        accepted_write(start, token, start)
    }

    #[test]
    fn a_clean_takeover_has_no_overlap() {
        let history = vec![
            Record::new(1_000, "c0.1", Event::Acquired { token: 1 }),
            Record::new(1_100, "c0.1", write(1_050, 1)),
            Record::new(4_100, "c0.1", write(4_000, 1)),
            Record::new(4_300, "c0.1", Event::KillerFired),
            Record::new(5_500, "c1.1", Event::Acquired { token: 2 }),
            Record::new(5_600, "c1.1", write(5_550, 2)),
        ];
        assert!(overlaps(&history).is_empty());
    }

    #[test]
    fn writes_after_a_successors_acquisition_are_one_overlap_per_token() {
        let history = vec![
            Record::new(1_000, "c0.1", Event::Acquired { token: 1 }),
            Record::new(2_000, "c1.1", Event::Acquired { token: 2 }),
            Record::new(2_150, "c0.1", write(2_100, 1)),
            Record::new(2_650, "c0.1", write(2_600, 1)),
            // the successor's own writes do not count
            Record::new(2_700, "c1.1", write(2_650, 2)),
        ];
        let found = overlaps(&history);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].holder, "c0.1");
        assert_eq!(found[0].successor, "c1.1");
        assert_eq!(found[0].length_ms(), 600);
        assert!(found[0].to_string().contains("600 ms after c1.1"));
    }

    /// What a forward step of the store's clock produced (the measured
    /// valkey run's shape): the holder renewed, its lease vanished, a rival
    /// acquired and the holder wrote on until its next renewal failed.
    /// Every check before this module passes it; only this one sees it.
    #[test]
    fn the_other_checks_miss_an_overlap_this_one_finds() {
        let armed = |t| Event::Armed {
            basis_ms: t,
            deadline_ms: Some(t + 3_200),
            success: true,
        };
        let history = vec![
            Record::new(1_000, "c0.1", armed(1_000)),
            Record::new(1_001, "c0.1", Event::Acquired { token: 1 }),
            Record::new(5_020, "c0.1", armed(5_000)),
            Record::new(5_100, "c1.1", armed(5_090)),
            Record::new(5_101, "c1.1", Event::Acquired { token: 2 }),
            Record::new(5_160, "c1.1", write(5_150, 2)),
            // fencing refused it; mutual exclusion was broken all the same
            Record::new(
                5_910,
                "c0.1",
                Event::Write {
                    start_ms: 5_900,
                    token: 1,
                    outcome: WriteOutcome::Rejected { seen: 2 },
                },
            ),
            Record::new(
                6_010,
                "c0.1",
                Event::Lost {
                    reason: "gone".into(),
                },
            ),
            Record::new(6_020, "c0.1", Event::Released),
        ];
        let log = [crate::guarded::LogEntry {
            seq: 5_150,
            token: 2,
            writer: "c1.1".into(),
        }];
        let bounds = crate::check::Bounds {
            stop_slack: std::time::Duration::from_millis(800),
            takeover_bound: std::time::Duration::from_secs(7),
        };
        assert!(crate::check::check(&history, &log, bounds, 7_000).ok());
        let lease = std::time::Duration::from_secs(4);
        assert!(crate::clock::acting_past_lease(&history, lease).is_empty());
        let found = overlaps(&history);
        assert_eq!(found.len(), 1, "{found:?}");
        assert_eq!(found[0].length_ms(), 799);
    }

    #[test]
    fn zombies_and_paused_processes_are_exempt_until_they_renew() {
        let history = vec![
            Record::new(1_000, "z2.1", Event::Acquired { token: 1 }),
            Record::new(2_000, "c1.1", Event::Acquired { token: 2 }),
            Record::new(2_150, "z2.1", write(2_100, 1)),
            Record::new(3_000, "c1.1", Event::SigStop),
            Record::new(8_000, "c0.1", Event::Acquired { token: 3 }),
            Record::new(9_000, "c1.1", Event::SigCont),
            Record::new(9_050, "c1.1", write(9_010, 2)),
        ];
        assert!(overlaps(&history).is_empty());
        // A renewal after the pause ends the exemption.
        let mut renewed_then = history.clone();
        renewed_then.push(Record::new(9_100, "c1.1", renewed(9_060)));
        renewed_then.push(Record::new(9_300, "c1.1", write(9_200, 2)));
        assert_eq!(overlaps(&renewed_then).len(), 1);
    }
}
