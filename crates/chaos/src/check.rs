//! The history checker: from every process's events and the guarded
//! resource's log, the figures of a run and its violations.
//!
//! Checks:
//!
//! - **No stale write accepted**: in the log (accept order), no token is
//!   lower than an earlier one; the same over the accepted-write events
//!   (by sequence number), and each event agrees with the log entry.
//! - **Fencing order**: successive acquisitions carry strictly increasing
//!   tokens.
//! - **Acting within deadlines**: no accepted write started after the
//!   writer's killer deadline in force at that moment (from its `armed`
//!   events); no write started after the process reported a loss; a
//!   leadership that was lost ended (`released`, or the killer fired) no
//!   later than `max(deadline, resumed) + stop_slack`, where `resumed` is
//!   the last SIGCONT the process got (a stopped process cannot act).
//! - **Zombies** (contenders that ignore their killer and keep writing
//!   after a loss, on purpose) are exempt from the deadline checks: their
//!   late writes are counted, and must be refused once a newer token has
//!   reached the resource, which the log check covers.
//! - **Takeover after a kill**: some other process acquired within
//!   `takeover_bound` of the killed leader's last successful write start
//!   (the basis of its last successful `armed` event).
//! - **No overlapping leaders** ([`overlap`], run by the harness): no
//!   non-zombie started a write after another process had acquired a
//!   higher token (pauses exempt until the next renewal); with a server
//!   clock fault, overlaps that a forward step explains are counted
//!   against their stated bound instead ([`crate::server_clock`]).

pub mod overlap;
mod report;

use std::{collections::HashMap, time::Duration};

pub use report::Report;

use crate::{
    event::{Event, Record, WriteOutcome},
    guarded::LogEntry,
};

/// Bounds the checker applies.
#[derive(Debug, Clone, Copy)]
pub struct Bounds {
    /// Allowed time from the killer deadline (or a resume) to the end of a
    /// lost leadership.
    pub stop_slack: Duration,
    /// Allowed time from a killed leader's last successful write start to
    /// the next acquisition by another process.
    pub takeover_bound: Duration,
}

#[derive(Default)]
struct Proc {
    /// `(emitted at, deadline)` changes, in order.
    deadlines: Vec<(u64, Option<u64>)>,
    last_success_basis: Option<u64>,
    leading: bool,
    lost_at: Option<u64>,
    resumed_at: Option<u64>,
    sigkilled: bool,
    zombie: bool,
}

impl Proc {
    fn deadline_at(&self, t: u64) -> Option<u64> {
        self.deadlines
            .iter()
            .rev()
            .find(|(at, _)| *at <= t)
            .and_then(|(_, d)| *d)
    }

    fn current_deadline(&self) -> Option<u64> {
        self.deadlines.last().and_then(|(_, d)| *d)
    }
}

fn dur(ms: u64) -> Duration {
    Duration::from_millis(ms)
}

fn as_ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// Checks a run: `records` from every process and the harness, `log` read
/// back from the resource, `end_ms` the end of the run.
pub fn check(records: &[Record], log: &[LogEntry], bounds: Bounds, end_ms: u64) -> Report {
    let mut report = Report::default();
    let mut records: Vec<&Record> = records.iter().collect();
    records.sort_by_key(|r| r.t_ms);
    let mut procs: HashMap<&str, Proc> = HashMap::new();
    let mut last_acquirer: Option<&str> = None;
    let mut last_token: Option<u64> = None;
    // Faults on leaders waiting for the next acquisition by someone else:
    // (process, fault time, is a kill, last success basis).
    let mut pending: Vec<(&str, u64, bool, Option<u64>)> = Vec::new();
    let mut accepted: Vec<(u64, u64, &str)> = Vec::new();
    let slack = as_ms(bounds.stop_slack);

    for r in &records {
        let p = r.proc.as_str();
        let proc = procs.entry(p).or_default();
        match &r.event {
            Event::Armed {
                basis_ms,
                deadline_ms,
                success,
            } => {
                proc.deadlines.push((r.t_ms, *deadline_ms));
                if *success {
                    proc.last_success_basis = Some(*basis_ms);
                }
            }
            Event::Acquired { token } => {
                report.acquisitions += 1;
                if last_acquirer != Some(p) {
                    report.takeovers += 1;
                }
                if let Some(prev) = last_token
                    && *token <= prev
                {
                    report.tokens_reused += 1;
                    report.violations.push(format!(
                        "{p} acquired token {token} at {} after token {prev} was issued",
                        r.t_ms
                    ));
                }
                last_token = Some(last_token.map_or(*token, |t| t.max(*token)));
                last_acquirer = Some(p);
                proc.leading = true;
                proc.lost_at = None;
                pending.retain(|(victim, fault_t, is_kill, _)| {
                    if *victim == p {
                        return true;
                    }
                    let took = dur(r.t_ms.saturating_sub(*fault_t));
                    report.worst_takeover = report.worst_takeover.max(Some(took));
                    if *is_kill {
                        report.worst_takeover_after_kill =
                            report.worst_takeover_after_kill.max(Some(took));
                    }
                    false
                });
            }
            Event::Write {
                start_ms,
                token,
                outcome,
            } if proc.zombie => {
                match outcome {
                    WriteOutcome::Accepted { seq } => {
                        report.writes_accepted += 1;
                        accepted.push((*seq, *token, p));
                    }
                    WriteOutcome::Rejected { .. } => report.stale_rejected += 1,
                    WriteOutcome::Failed => report.writes_failed += 1,
                }
                if proc.lost_at.is_some_and(|lost| *start_ms > lost) {
                    report.zombie_late_writes += 1;
                    match outcome {
                        WriteOutcome::Accepted { .. } => report.zombie_late_accepted += 1,
                        WriteOutcome::Rejected { .. } => report.zombie_late_rejected += 1,
                        WriteOutcome::Failed => {}
                    }
                }
            }
            Event::Write {
                start_ms,
                token,
                outcome,
            } => {
                let deadline = proc.deadline_at(*start_ms);
                let past = deadline.is_none_or(|d| *start_ms > d);
                if past {
                    report.writes_past_deadline += 1;
                }
                if let Some(lost) = proc.lost_at
                    && *start_ms > lost
                {
                    report.violations.push(format!(
                        "{p} started a write at {start_ms} after reporting a loss at {lost}"
                    ));
                }
                match outcome {
                    WriteOutcome::Accepted { seq } => {
                        report.writes_accepted += 1;
                        accepted.push((*seq, *token, p));
                        if past {
                            report.violations.push(format!(
                                "{p} had a write (token {token}, seq {seq}) accepted that started at {start_ms}, past its killer deadline {deadline:?}"
                            ));
                        }
                    }
                    WriteOutcome::Rejected { .. } => report.stale_rejected += 1,
                    WriteOutcome::Failed => report.writes_failed += 1,
                }
            }
            Event::Lost { .. } => proc.lost_at = Some(r.t_ms),
            Event::Released | Event::KillerFired => {
                if matches!(r.event, Event::KillerFired) {
                    report.killer_exits += 1;
                }
                if proc.leading && !proc.sigkilled && !proc.zombie {
                    let lost = proc.lost_at.is_some() || matches!(r.event, Event::KillerFired);
                    if lost {
                        report.losses_checked += 1;
                        let limit = proc
                            .current_deadline()
                            .or_else(|| proc.deadline_at(proc.lost_at.unwrap_or(r.t_ms)))
                            .map(|d| d.max(proc.resumed_at.unwrap_or(0)) + slack);
                        if let Some(limit) = limit
                            && r.t_ms > limit
                        {
                            report.violations.push(format!(
                                "{p} ended a lost leadership at {} ({:?}), later than its deadline allows ({limit})",
                                r.t_ms, r.event
                            ));
                        }
                    }
                }
                proc.leading = false;
            }
            Event::SigKill => {
                report.kills += 1;
                proc.sigkilled = true;
                pending.push((p, r.t_ms, true, proc.last_success_basis));
            }
            Event::SigStop => {
                report.pauses += 1;
                pending.push((p, r.t_ms, false, None));
            }
            Event::SigCont => proc.resumed_at = Some(r.t_ms),
            Event::Cut => {
                report.partitions += 1;
                pending.push((p, r.t_ms, false, None));
            }
            Event::Started { zombie, .. } => proc.zombie = *zombie,
            Event::Exiting | Event::Restored | Event::Exited { .. } | Event::ServerClock { .. } => {
            }
        }
    }

    // Kills whose takeover never came: a violation once the bound has passed.
    for (victim, fault_t, is_kill, basis) in &pending {
        if !is_kill {
            continue;
        }
        let since = basis.unwrap_or(*fault_t);
        if end_ms > since + as_ms(bounds.takeover_bound) {
            report.violations.push(format!(
                "no process acquired after {victim} was killed at {fault_t} (run ended at {end_ms})"
            ));
        }
    }
    check_takeover_bounds(&records, bounds, &mut report);
    check_order(&accepted, log, &mut report);
    report
}

/// After each kill, the next acquisition by another process must come
/// within `takeover_bound` of the victim's last successful write start.
fn check_takeover_bounds(records: &[&Record], bounds: Bounds, report: &mut Report) {
    let mut basis: HashMap<&str, u64> = HashMap::new();
    for (i, r) in records.iter().enumerate() {
        match &r.event {
            Event::Armed {
                basis_ms,
                success: true,
                ..
            } => {
                basis.insert(r.proc.as_str(), *basis_ms);
            }
            Event::SigKill => {
                let since = basis.get(r.proc.as_str()).copied().unwrap_or(r.t_ms);
                let next = records[i..]
                    .iter()
                    .find(|n| n.proc != r.proc && matches!(n.event, Event::Acquired { .. }));
                if let Some(next) = next {
                    let took = dur(next.t_ms.saturating_sub(since));
                    if took > bounds.takeover_bound {
                        report.violations.push(format!(
                            "after {} was killed, {} acquired {:.2}s after the victim's last successful write start (bound {:.2}s)",
                            r.proc,
                            next.proc,
                            took.as_secs_f64(),
                            bounds.takeover_bound.as_secs_f64()
                        ));
                    }
                }
            }
            _ => {}
        }
    }
}

/// Accepted tokens never decrease, in the log and in the events.
fn check_order(accepted: &[(u64, u64, &str)], log: &[LogEntry], report: &mut Report) {
    report.log_entries = log.len() as u64;
    let mut max: Option<(u64, u64)> = None; // (token, seq)
    for entry in log {
        if let Some((top, at)) = max
            && entry.token < top
        {
            report.stale_accepted += 1;
            report.violations.push(format!(
                "log: seq {} by {} carries token {}, lower than token {top} accepted at seq {at}",
                entry.seq, entry.writer, entry.token
            ));
        }
        if max.is_none_or(|(top, _)| entry.token > top) {
            max = Some((entry.token, entry.seq));
        }
    }
    let mut by_seq: Vec<&(u64, u64, &str)> = accepted.iter().collect();
    by_seq.sort_by_key(|(seq, _, _)| *seq);
    let mut top: Option<u64> = None;
    let mut stale_events = 0;
    for (seq, token, p) in by_seq {
        if let Some(t) = top
            && *token < t
        {
            stale_events += 1;
            report.violations.push(format!(
                "events: {p} had seq {seq} accepted with token {token} after token {t}"
            ));
        }
        top = Some(top.map_or(*token, |t| t.max(*token)));
        if let Some(entry) = log.iter().find(|e| e.seq == *seq)
            && entry.token != *token
        {
            report.violations.push(format!(
                "events: {p} reported seq {seq} with token {token}, the log holds token {}",
                entry.token
            ));
        }
    }
    report.stale_accepted = report.stale_accepted.max(stale_events);
}

#[cfg(test)]
mod tests {
    use super::*;

    fn armed(basis: u64, deadline: u64) -> Event {
        Event::Armed {
            basis_ms: basis,
            deadline_ms: Some(deadline),
            success: true,
        }
    }

    fn write(start: u64, token: u64, outcome: WriteOutcome) -> Event {
        Event::Write {
            start_ms: start,
            token,
            outcome,
        }
    }

    fn entry(seq: u64, token: u64, writer: &str) -> LogEntry {
        LogEntry {
            seq,
            token,
            writer: writer.into(),
        }
    }

    const BOUNDS: Bounds = Bounds {
        stop_slack: Duration::from_millis(800),
        takeover_bound: Duration::from_millis(6200),
    };

    /// A clean history: a leads with token 1, is killed, b takes over with 2.
    fn clean() -> (Vec<Record>, Vec<LogEntry>) {
        let records = vec![
            Record::new(1000, "a", armed(1000, 4200)),
            Record::new(1001, "a", Event::Acquired { token: 1 }),
            Record::new(1100, "a", write(1050, 1, WriteOutcome::Accepted { seq: 1 })),
            Record::new(2000, "a", Event::SigKill),
            Record::new(6000, "b", armed(6000, 9200)),
            Record::new(6001, "b", Event::Acquired { token: 2 }),
            Record::new(6100, "b", write(6050, 2, WriteOutcome::Accepted { seq: 2 })),
        ];
        (records, vec![entry(1, 1, "a"), entry(2, 2, "b")])
    }

    #[test]
    fn a_clean_history_passes_with_its_figures() {
        let (records, log) = clean();
        let report = check(&records, &log, BOUNDS, 7000);
        assert!(report.ok(), "{report}");
        assert_eq!(report.kills, 1);
        assert_eq!(report.takeovers, 2);
        assert_eq!(report.writes_accepted, 2);
        assert_eq!(report.stale_accepted, 0);
        assert_eq!(
            report.worst_takeover_after_kill,
            Some(Duration::from_millis(4001))
        );
    }

    #[test]
    fn a_stale_accepted_write_in_the_log_is_reported() {
        let (records, mut log) = clean();
        log.push(entry(3, 1, "a"));
        let report = check(&records, &log, BOUNDS, 7000);
        assert!(!report.ok());
        assert_eq!(report.stale_accepted, 1);
        assert!(report.violations[0].contains("seq 3"), "{report}");
    }

    #[test]
    fn a_stale_accepted_write_event_is_reported() {
        let (mut records, log) = clean();
        records.push(Record::new(
            6200,
            "c",
            write(6150, 1, WriteOutcome::Accepted { seq: 3 }),
        ));
        let report = check(&records, &log, BOUNDS, 7000);
        assert_eq!(report.stale_accepted, 1, "{report}");
        assert!(!report.ok());
    }

    #[test]
    fn a_write_accepted_past_the_deadline_is_reported() {
        let (mut records, log) = clean();
        records.push(Record::new(
            4300,
            "a",
            write(4250, 1, WriteOutcome::Accepted { seq: 9 }),
        ));
        let report = check(&records, &log, BOUNDS, 7000);
        assert_eq!(report.writes_past_deadline, 1);
        assert!(
            report
                .violations
                .iter()
                .any(|v| v.contains("past its killer deadline")),
            "{report}"
        );
    }

    #[test]
    fn a_late_end_of_a_lost_leadership_is_reported() {
        let records = vec![
            Record::new(1000, "a", armed(1000, 4200)),
            Record::new(1001, "a", Event::Acquired { token: 1 }),
            Record::new(2000, "a", Event::Lost { reason: "x".into() }),
            Record::new(5500, "a", Event::Released),
        ];
        let report = check(&records, &[], BOUNDS, 6000);
        assert_eq!(report.losses_checked, 1);
        assert!(!report.ok(), "{report}");
        // Ending by the deadline (plus slack) is fine.
        let mut on_time = records.clone();
        on_time[3].t_ms = 4500;
        assert!(check(&on_time, &[], BOUNDS, 6000).ok());
    }

    #[test]
    fn a_slow_takeover_after_a_kill_is_reported() {
        let (mut records, log) = clean();
        for r in records.iter_mut().filter(|r| r.proc == "b") {
            r.t_ms += 5000;
        }
        let report = check(&records, &log, BOUNDS, 20_000);
        assert!(
            report.violations.iter().any(|v| v.contains("bound")),
            "{report}"
        );
    }

    #[test]
    fn zombie_late_writes_are_counted_not_flagged() {
        let records = vec![
            Record::new(
                999,
                "z",
                Event::Started {
                    pid: 1,
                    zombie: true,
                },
            ),
            Record::new(1000, "z", armed(1000, 4200)),
            Record::new(1001, "z", Event::Acquired { token: 1 }),
            Record::new(2000, "z", Event::Lost { reason: "x".into() }),
            Record::new(2100, "z", write(2050, 1, WriteOutcome::Accepted { seq: 1 })),
            Record::new(6000, "b", armed(6000, 9200)),
            Record::new(6001, "b", Event::Acquired { token: 2 }),
            Record::new(6100, "b", write(6050, 2, WriteOutcome::Accepted { seq: 2 })),
            Record::new(
                6200,
                "z",
                write(6150, 1, WriteOutcome::Rejected { seen: 2 }),
            ),
            Record::new(9000, "z", Event::Released),
        ];
        let log = vec![entry(1, 1, "z"), entry(2, 2, "b")];
        let report = check(&records, &log, BOUNDS, 10_000);
        assert!(report.ok(), "{report}");
        assert_eq!(report.zombie_late_writes, 2);
        assert_eq!(report.zombie_late_accepted, 1);
        assert_eq!(report.zombie_late_rejected, 1);
        assert_eq!(report.stale_rejected, 1);
        // The same history from a normal contender is a violation.
        let normal: Vec<Record> = records[1..].to_vec();
        assert!(!check(&normal, &log, BOUNDS, 10_000).ok());
    }
}
