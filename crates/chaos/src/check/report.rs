//! The report of a run: its figures and violations, and how they print.

use std::{fmt, time::Duration};

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
    /// Leaders that acted after another process had acquired (see
    /// [`crate::check::overlap`]; filled in by the harness), each a
    /// violation unless a forward step of the store server's clock
    /// explains it within its bound.
    pub overlaps: u64,
    /// Of those, explained by a server clock fault and within its bound
    /// ([`crate::server_clock::overlap_bound`]): a stated limit, not a
    /// violation.
    pub overlaps_server_clock: u64,
    /// The longest overlap.
    pub worst_overlap: Option<Duration>,
    /// Changes of the store server's clock (a server clock fault).
    pub server_clock_changes: u64,
    /// What a stated limit allowed, one line each (the overlaps a server
    /// clock step explains): not violations, printed as evidence.
    pub within_limits: Vec<String>,
    /// The observer beside the contenders (on a store that reports its
    /// writes): leaderships it reported, and acquisitions it missed (each
    /// a violation); `None` when it was not run.
    pub observer: Option<(u64, u64)>,
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
            "kills {} pauses {} partitions {} | takeovers {} worst {} (after kill {}) | accepted {} stale-rejected {} stale-accepted {} unanswered {} | tokens-reused {} past-lease {} | overlaps {} (server-clock {}, worst {}) clock-changes {} | violations {}",
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
            self.overlaps,
            self.overlaps_server_clock,
            ms(self.worst_overlap),
            self.server_clock_changes,
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
        writeln!(
            f,
            "overlapping leaders {} (explained by a server clock step, within its bound: {}), worst {}  server clock changes {}",
            self.overlaps,
            self.overlaps_server_clock,
            ms(self.worst_overlap),
            self.server_clock_changes
        )?;
        match self.observer {
            Some((reported, missed)) => writeln!(
                f,
                "observer (following the store's writes): {reported} leaderships reported, {missed} acquisitions missed"
            )?,
            None => writeln!(
                f,
                "observer: not run (the store does not report its writes, or the engine itself was faulted)"
            )?,
        }
        for line in &self.within_limits {
            writeln!(f, "  within a stated limit: {line}")?;
        }
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
