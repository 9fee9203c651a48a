//! Clock-rate faults: one contender slot runs under libfaketime with its
//! clocks (wall and monotonic) going at `rate` times real time, and the
//! check that would see the overlap a too-slow clock allows.
//!
//! The election's killer fires `0.8 d` after the last successful write
//! started, on the leader's own monotonic clock; the lease ends `d` after
//! that write on the store's clock. A leader whose clock runs at `rate`
//! of real time fires at `0.8 d / rate` real: before the lease ends while
//! `rate > 0.8` (a clock up to 20 % slow, or any faster one), after it
//! below (`x0.77`, a clock 1.3 times slower: `1.04 d`), where it may act
//! while another process holds the lease. [`acting_past_lease`] flags
//! every write a non-zombie started after its lease's end, in real time.
//!
//! A faked contender stamps its events on its faked wall clock;
//! [`FakeClock::to_real`] maps them back (libfaketime's `+0 xR` starts the
//! fake clock at the real time the process starts and runs it at `R`).
//!
//! ```
//! use std::time::Duration;
//! use chaos::{clock::acting_past_lease, event::{Event, Record, WriteOutcome}};
//!
//! let rec = |t_ms, event| Record { t_ms, proc: "c0.1".into(), event };
//! let history = vec![
//!     rec(1_000, Event::Armed { basis_ms: 1_000, deadline_ms: Some(4_200), success: true }),
//!     // 4.5 s after the renewal's start, the 4 s lease is over:
//!     rec(5_500, Event::Write { start_ms: 5_500, token: 3, outcome: WriteOutcome::Failed }),
//! ];
//! assert_eq!(acting_past_lease(&history, Duration::from_secs(4)).len(), 1);
//! ```

use std::{collections::HashMap, path::PathBuf, time::Duration};

use crate::event::{Event, Record};

/// Where Debian's `libfaketime` package puts the preload library.
pub const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// A contender's faked clock: started at `start_ms` (real), going at `rate`.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FakeClock {
    /// The real wall time (ms) the process started at.
    pub start_ms: u64,
    /// Fake seconds per real second (`1.15`: 15 % fast).
    pub rate: f64,
}

impl FakeClock {
    /// The environment that runs a process under this rate: `LD_PRELOAD`
    /// of libfaketime and `FAKETIME="+0 x<rate>"`.
    ///
    /// # Errors
    ///
    /// The library is missing (Debian: `apt-get install libfaketime`).
    pub fn env(rate: f64) -> Result<Vec<(String, String)>, String> {
        let lib = PathBuf::from(LIBFAKETIME);
        if !lib.is_file() {
            return Err(format!(
                "{LIBFAKETIME} is missing (Debian: apt-get install libfaketime)"
            ));
        }
        Ok(vec![
            ("LD_PRELOAD".into(), LIBFAKETIME.into()),
            ("FAKETIME".into(), format!("+0 x{rate}")),
            // Read FAKETIME once, not on every call.
            ("FAKETIME_NO_CACHE".into(), "0".into()),
        ])
    }

    /// The real wall time of a fake `ms`.
    pub fn to_real(&self, ms: u64) -> u64 {
        let fake_elapsed = ms.saturating_sub(self.start_ms) as f64;
        self.start_ms + (fake_elapsed / self.rate).round() as u64
    }

    /// `record` with every time in it mapped to real time.
    pub fn record_to_real(&self, mut record: Record) -> Record {
        record.t_ms = self.to_real(record.t_ms);
        match &mut record.event {
            Event::Armed {
                basis_ms,
                deadline_ms,
                ..
            } => {
                *basis_ms = self.to_real(*basis_ms);
                *deadline_ms = deadline_ms.map(|d| self.to_real(d));
            }
            Event::Write { start_ms, .. } => *start_ms = self.to_real(*start_ms),
            _ => {}
        }
        record
    }
}

/// Every write a non-zombie contender (`c…`) started after the lease of its
/// last successful acquisition or renewal ended (that write's start plus
/// `lease`, in real time): it acted while another process could hold the
/// lease. One line per such write. A process the harness SIGSTOPped is
/// exempt from its SIGCONT until its next successful write: a pause is
/// what the fencing token is for, and its late writes are checked there.
pub fn acting_past_lease(history: &[Record], lease: Duration) -> Vec<String> {
    let lease_ms = u64::try_from(lease.as_millis()).unwrap_or(u64::MAX);
    let mut basis: HashMap<&str, Option<u64>> = HashMap::new();
    let mut found = Vec::new();
    for r in history {
        if !r.proc.starts_with('c') {
            continue;
        }
        match &r.event {
            Event::Armed {
                basis_ms,
                success: true,
                ..
            } => {
                basis.insert(&r.proc, Some(*basis_ms));
            }
            Event::SigStop | Event::SigCont => {
                basis.insert(&r.proc, None);
            }
            Event::Write {
                start_ms, token, ..
            } => {
                if let Some(Some(b)) = basis.get(r.proc.as_str())
                    && *start_ms > b.saturating_add(lease_ms)
                {
                    found.push(format!(
                        "{} started a write with token {token} at {start_ms}, {} ms after its \
                         lease (from the write started at {b}) ended",
                        r.proc,
                        start_ms - b - lease_ms
                    ));
                }
            }
            _ => {}
        }
    }
    found
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::event::WriteOutcome;

    #[test]
    fn writes_within_the_lease_pass_and_later_ones_are_flagged() {
        let d = Duration::from_secs(4);
        let armed = |t| Event::Armed {
            basis_ms: t,
            deadline_ms: Some(t + 3_200),
            success: true,
        };
        let write = |t| Event::Write {
            start_ms: t,
            token: 7,
            outcome: WriteOutcome::Failed,
        };
        // A clock 20 % slow at worst: the killer (0.8 d on that clock)
        // fires at d real, the last write starts before.
        let ok = vec![
            Record::new(0, "c0.1", armed(0)),
            Record::new(3_900, "c0.1", write(3_900)),
            Record::new(4_000, "c0.1", armed(4_000)),
            Record::new(7_950, "c0.1", write(7_950)),
            // zombies are exempt
            Record::new(9_000, "z1.1", write(9_000)),
            // and so is a paused process until it renews again
            Record::new(8_000, "c0.1", Event::SigStop),
            Record::new(14_000, "c0.1", Event::SigCont),
            Record::new(14_010, "c0.1", write(14_010)),
        ];
        assert!(acting_past_lease(&ok, d).is_empty());
        // 1.3 times slower: the killer fires at 1.04 d.
        let late = vec![
            Record::new(0, "c0.1", armed(0)),
            Record::new(4_100, "c0.1", write(4_100)),
        ];
        let found = acting_past_lease(&late, d);
        assert_eq!(found.len(), 1, "{found:?}");
        assert!(found[0].contains("100 ms after"), "{found:?}");
    }

    #[test]
    fn fake_times_map_back_to_real_ones() {
        let slow = FakeClock {
            start_ms: 1_000,
            rate: 0.8,
        };
        assert_eq!(slow.to_real(1_000), 1_000);
        assert_eq!(slow.to_real(1_800), 2_000);
        let r = slow.record_to_real(Record::new(
            1_800,
            "c0.1",
            Event::Armed {
                basis_ms: 1_400,
                deadline_ms: Some(4_600),
                success: true,
            },
        ));
        assert_eq!(r.t_ms, 2_000);
        assert_eq!(
            r.event,
            Event::Armed {
                basis_ms: 1_500,
                deadline_ms: Some(5_500),
                success: true
            }
        );
    }
}
