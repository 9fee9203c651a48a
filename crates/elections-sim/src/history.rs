//! The leadership history of a run and the checker that judges it.

use std::{collections::BTreeMap, fmt, time::Duration};

use tokio::time::Instant;

use crate::groups::Group;

/// Who acted: a contender and its incarnation (a restart is a new process).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Who {
    /// Contender number.
    pub contender: usize,
    /// Incarnation of that contender (0 = first process).
    pub incarnation: u32,
}

/// How an interval ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EndCause {
    /// The contender stopped its work itself (after its handle fired, or
    /// stepping down), before releasing.
    Stopped,
    /// Its killer deadline passed first: the process is dead from then on.
    Killed,
    /// The process crashed (injected).
    Crashed,
    /// Still leading when the run ended.
    RunEnded,
}

/// One leadership as the contender itself lived it: from the moment
/// `acquire_leadership` returned until it stopped acting (its work stopped,
/// or its killer deadline, or a crash).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Interval {
    /// Election key.
    pub key: String,
    /// Who led.
    pub who: Who,
    /// Fencing token of the leadership.
    pub token: u64,
    /// Start, as an offset from the run's start.
    pub start: Duration,
    /// End, as an offset from the run's start (`None` while open).
    pub end: Option<Duration>,
    /// How it ended.
    pub cause: Option<EndCause>,
    /// The lock and cluster size of a VVM's leadership (`None` for bare
    /// elections).
    pub group: Option<Group>,
}

impl fmt::Display for Interval {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "key {} c{}/i{} token {} [{:.3}s, {}) {:?}",
            self.key,
            self.who.contender,
            self.who.incarnation,
            self.token,
            self.start.as_secs_f64(),
            self.end
                .map_or("open".to_string(), |e| format!("{:.3}s", e.as_secs_f64())),
            self.cause
        )?;
        if let Some(group) = self.group {
            write!(f, " cluster size {}", group.size)?;
        }
        Ok(())
    }
}

/// The record of one run.
#[derive(Debug)]
pub(crate) struct History {
    origin: Instant,
    intervals: Vec<Interval>,
    /// Human-readable event log; its hash proves a replay is exact.
    pub(crate) log: Vec<String>,
}

impl History {
    /// An empty history whose offsets count from `origin`.
    pub(crate) fn new(origin: Instant) -> Self {
        History {
            origin,
            intervals: Vec::new(),
            log: Vec::new(),
        }
    }

    /// Offset of `now` from the run's start.
    pub(crate) fn offset(&self, at: Instant) -> Duration {
        at.saturating_duration_since(self.origin)
    }

    /// Appends a line to the event log.
    pub(crate) fn note(&mut self, at: Instant, line: impl fmt::Display) {
        let t = self.offset(at);
        self.log.push(format!("{:>10.3} {line}", t.as_secs_f64()));
    }

    /// Opens an interval; returns its index.
    pub(crate) fn begin(
        &mut self,
        key: &str,
        who: Who,
        token: u64,
        group: Option<Group>,
        at: Instant,
    ) -> usize {
        // Tokens start at the wall clock (see `elections::fencing`): the log
        // names a token by its rank among the key's tokens so far, which a
        // replay reproduces; the checker compares the tokens themselves.
        let rank = 1 + self
            .intervals
            .iter()
            .filter(|iv| iv.key == key && iv.token < token)
            .count();
        self.note(
            at,
            format_args!(
                "lead  {key} c{}/i{} token #{rank}",
                who.contender, who.incarnation
            ),
        );
        self.intervals.push(Interval {
            key: key.to_string(),
            who,
            token,
            start: self.offset(at),
            end: None,
            cause: None,
            group,
        });
        self.intervals.len() - 1
    }

    /// Closes interval `idx` at `at` unless it is already closed (the
    /// earliest end wins: a kill at the deadline beats a later stop).
    pub(crate) fn end(&mut self, idx: usize, at: Instant, cause: EndCause) {
        let offset = self.offset(at);
        if let Some(iv) = self.intervals.get_mut(idx)
            && iv.end.is_none()
        {
            iv.end = Some(offset);
            iv.cause = Some(cause);
            let line = format!(
                "end   {} c{}/i{} {cause:?}",
                iv.key, iv.who.contender, iv.who.incarnation
            );
            self.note(at, line);
        }
    }

    /// Every interval so far.
    pub(crate) fn intervals(&self) -> &[Interval] {
        &self.intervals
    }

    /// Closes every open interval at `at` ([`EndCause::RunEnded`]).
    pub(crate) fn close_all(&mut self, at: Instant) {
        for idx in 0..self.intervals.len() {
            self.end(idx, at, EndCause::RunEnded);
        }
    }
}

/// What the checker found.
#[derive(Debug, Default, Clone)]
pub struct Verdict {
    /// Pairs of intervals on one key that overlap in time (must be empty).
    pub overlaps: Vec<(Interval, Interval)>,
    /// Pairs where a later leadership had a token not above an earlier one's.
    pub fencing_violations: Vec<(Interval, Interval)>,
    /// Longest gap between one leader's end and the next one's start.
    pub worst_takeover: Duration,
    /// Per key, how long after the faults stopped until someone led.
    pub recovery: BTreeMap<String, Option<Duration>>,
}

/// Checks mutual exclusion, fencing order and recovery after `healed_at`.
pub fn check(intervals: &[Interval], keys: &[String], healed_at: Duration) -> Verdict {
    let mut verdict = Verdict::default();
    for key in keys {
        let mut on_key: Vec<&Interval> = intervals.iter().filter(|i| &i.key == key).collect();
        on_key.sort_by_key(|i| (i.start, i.who));
        for (n, a) in on_key.iter().enumerate() {
            let a_end = a.end.unwrap_or(Duration::MAX);
            for b in &on_key[n + 1..] {
                if b.start < a_end && a.who != b.who {
                    verdict.overlaps.push(((*a).clone(), (*b).clone()));
                }
                if b.token <= a.token {
                    verdict
                        .fencing_violations
                        .push(((*a).clone(), (*b).clone()));
                }
            }
        }
        for pair in on_key.windows(2) {
            if let Some(end) = pair[0].end {
                verdict.worst_takeover = verdict
                    .worst_takeover
                    .max(pair[1].start.saturating_sub(end));
            }
        }
        let recovered = on_key
            .iter()
            .filter(|i| i.end.is_none_or(|e| e > healed_at))
            .map(|i| i.start.max(healed_at) - healed_at)
            .min();
        verdict.recovery.insert(key.clone(), recovered);
    }
    verdict
}

#[cfg(test)]
mod tests {
    use super::*;

    fn iv(c: usize, token: u64, start: u64, end: u64) -> Interval {
        Interval {
            key: "k".into(),
            who: Who {
                contender: c,
                incarnation: 0,
            },
            token,
            start: Duration::from_secs(start),
            end: Some(Duration::from_secs(end)),
            cause: Some(EndCause::Stopped),
            group: None,
        }
    }

    #[test]
    fn finds_overlaps_and_fencing_violations() {
        let keys = vec!["k".to_string()];
        let ok = check(
            &[iv(0, 1, 0, 10), iv(1, 2, 10, 20)],
            &keys,
            Duration::from_secs(5),
        );
        assert!(ok.overlaps.is_empty() && ok.fencing_violations.is_empty());
        assert_eq!(ok.worst_takeover, Duration::ZERO);
        assert_eq!(ok.recovery["k"], Some(Duration::ZERO));
        let bad = check(
            &[iv(0, 2, 0, 10), iv(1, 1, 9, 20)],
            &keys,
            Duration::from_secs(30),
        );
        assert_eq!(bad.overlaps.len(), 1);
        assert_eq!(bad.fencing_violations.len(), 1);
        assert_eq!(bad.recovery["k"], None);
    }
}
