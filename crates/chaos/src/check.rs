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

use std::{collections::HashMap, fmt, time::Duration};

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

/// The figures and the violations of one run.
#[derive(Debug, Default, Clone)]
pub struct Report {
    /// SIGKILLs sent to leaders.
    pub kills: u64,
    /// SIGSTOP/SIGCONT pauses of leaders.
    pub pauses: u64,
    /// Proxy cuts of leaders.
    pub partitions: u64,
    /// Acquisitions by a different process than the previous one.
    pub takeovers: u64,
    /// Acquisitions in all.
    pub acquisitions: u64,
    /// Worst time from a fault on a leader to the next acquisition by another process.
    pub worst_takeover: Option<Duration>,
    /// Worst time from a SIGKILL to the next acquisition.
    pub worst_takeover_after_kill: Option<Duration>,
    /// Writes accepted by the resource.
    pub writes_accepted: u64,
    /// Writes the resource refused for a stale token.
    pub stale_rejected: u64,
    /// Writes without an answer.
    pub writes_failed: u64,
    /// Accepted writes whose token is lower than an earlier accepted one.
    pub stale_accepted: u64,
    /// Writes started after the writer's killer deadline (all must be refused).
    pub writes_past_deadline: u64,
    /// Lost leaderships whose end was checked against the deadline.
    pub losses_checked: u64,
    /// Processes ended by their killer.
    pub killer_exits: u64,
    /// Writes by zombies after their loss.
    pub zombie_late_writes: u64,
    /// Of those, refused by the resource.
    pub zombie_late_rejected: u64,
    /// Of those, accepted: with fencing, only before any newer token
    /// reached the resource (otherwise the log check flags them).
    pub zombie_late_accepted: u64,
    /// Entries in the resource's log.
    pub log_entries: u64,
    /// Acquisitions handed a token not above one issued before (the
    /// fencing counter went back, as after a failover that lost writes).
    pub tokens_reused: u64,
    /// Writes a non-zombie started after its lease ended, in real time
    /// (see [`crate::clock::acting_past_lease`]; filled in by the harness).
    pub writes_past_lease: u64,
    /// Every violation, readable.
    pub violations: Vec<String>,
}

impl Report {
    /// True when no violation was found.
    pub fn ok(&self) -> bool {
        self.violations.is_empty()
    }
}

fn ms(d: Option<Duration>) -> String {
    d.map_or("-".into(), |d| format!("{:.2}s", d.as_secs_f64()))
}

impl Report {
    /// The headline figures on one line (for a table of runs):
    /// faults, takeovers, worst takeover, writes accepted / stale rejected /
    /// stale accepted / unanswered, violations.
    pub fn summary_line(&self) -> String {
        format!(
            "kills {} pauses {} partitions {} | takeovers {} worst {} (after kill {}) | accepted {} stale-rejected {} stale-accepted {} unanswered {} | tokens-reused {} past-lease {} | violations {}",
            self.kills,
            self.pauses,
            self.partitions,
            self.takeovers,
            ms(self.worst_takeover),
            ms(self.worst_takeover_after_kill),
            self.writes_accepted,
            self.stale_rejected,
            self.stale_accepted,
            self.writes_failed,
            self.tokens_reused,
            self.writes_past_lease,
            self.violations.len()
        )
    }
}

impl fmt::Display for Report {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        writeln!(
            f,
            "kills {}  pauses {}  partitions {}  takeovers {} (acquisitions {})",
            self.kills, self.pauses, self.partitions, self.takeovers, self.acquisitions
        )?;
        writeln!(
            f,
            "worst takeover {} (after a kill: {})",
            ms(self.worst_takeover),
            ms(self.worst_takeover_after_kill)
        )?;
        writeln!(
            f,
            "writes accepted {}  stale writes rejected {}  stale writes accepted {}  unanswered {}  log entries {}",
            self.writes_accepted,
            self.stale_rejected,
            self.stale_accepted,
            self.writes_failed,
            self.log_entries
        )?;
        writeln!(
            f,
            "writes started past the killer deadline {} (none accepted unless listed below)  lost leaderships checked {}  killer exits {}",
            self.writes_past_deadline, self.losses_checked, self.killer_exits
        )?;
        writeln!(
            f,
            "zombie writes after loss {} (rejected {}, accepted {})",
            self.zombie_late_writes, self.zombie_late_rejected, self.zombie_late_accepted
        )?;
        writeln!(
            f,
            "fencing tokens reused {}  writes started past the lease {}",
            self.tokens_reused, self.writes_past_lease
        )?;
        if self.violations.is_empty() {
            write!(f, "violations: none")
        } else {
            writeln!(f, "violations: {}", self.violations.len())?;
            for v in &self.violations {
                writeln!(f, "  - {v}")?;
            }
            Ok(())
        }
    }
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
            Event::Exiting | Event::Restored | Event::Exited { .. } => {}
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

    fn rec(t_ms: u64, proc: &str, event: Event) -> Record {
        Record {
            t_ms,
            proc: proc.into(),
            event,
        }
    }

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
            rec(1000, "a", armed(1000, 4200)),
            rec(1001, "a", Event::Acquired { token: 1 }),
            rec(1100, "a", write(1050, 1, WriteOutcome::Accepted { seq: 1 })),
            rec(2000, "a", Event::SigKill),
            rec(6000, "b", armed(6000, 9200)),
            rec(6001, "b", Event::Acquired { token: 2 }),
            rec(6100, "b", write(6050, 2, WriteOutcome::Accepted { seq: 2 })),
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
        records.push(rec(
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
        records.push(rec(
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
            rec(1000, "a", armed(1000, 4200)),
            rec(1001, "a", Event::Acquired { token: 1 }),
            rec(2000, "a", Event::Lost { reason: "x".into() }),
            rec(5500, "a", Event::Released),
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
            rec(
                999,
                "z",
                Event::Started {
                    pid: 1,
                    zombie: true,
                },
            ),
            rec(1000, "z", armed(1000, 4200)),
            rec(1001, "z", Event::Acquired { token: 1 }),
            rec(2000, "z", Event::Lost { reason: "x".into() }),
            rec(2100, "z", write(2050, 1, WriteOutcome::Accepted { seq: 1 })),
            rec(6000, "b", armed(6000, 9200)),
            rec(6001, "b", Event::Acquired { token: 2 }),
            rec(6100, "b", write(6050, 2, WriteOutcome::Accepted { seq: 2 })),
            rec(
                6200,
                "z",
                write(6150, 1, WriteOutcome::Rejected { seen: 2 }),
            ),
            rec(9000, "z", Event::Released),
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
