//! Server clock faults: the engine server's **wall clock** stepped or
//! strobed mid-run, while its monotonic clock runs on (what an NTP step, a
//! VM migration or a leap smear gone wrong does to a store server).
//!
//! The engine runs with a preload library that adds an offset, read from
//! a file, to every wall-clock read (`cargo xtask chaos --server-clock`
//! starts it so: libfaketime with `FAKETIME_TIMESTAMP_FILE` and
//! `FAKETIME_NO_CACHE=1`, or, for a server linked with jemalloc, which
//! libfaketime cannot start, a small shim that reads the same file). The
//! harness rewrites that file ([`ClockFile`]) on the [`plan`] of the
//! fault and records each change as an [`Event::ServerClock`].
//!
//! What a change does to leases whose expiry the server judges by its wall
//! clock (Valkey's `PX`, PostgreSQL's `now()`): a **forward** step of `Δ`
//! ends every lease `Δ` early, so once `Δ > 0.2 d` a rival can acquire
//! while the holder still acts; the holder learns it at its next renewal
//! (at most `d/4` after its last one) when that renewal's answer comes (a
//! storage call, at most `d/4`): [`overlap_bound`]. A **backward** step
//! lengthens every lease by `Δ`: nobody can take over a dead holder's
//! lease for that much longer ([`takeover_slack`]). A **strobe** flips the
//! clock between `+Δ` and true time every [`STROBE_FLIP`]: both at once.
//!
//! ```
//! use std::time::Duration;
//! use chaos::server_clock::{ServerClockFault, plan};
//!
//! let fault: ServerClockFault = "step:+30s".parse()?;
//! let steps = plan(fault, Duration::from_secs(4), Duration::from_secs(30));
//! // At 4 s, 16 s and 28 s into the run, 30 s further each time.
//! assert_eq!(steps, [(4_000, 30_000), (16_000, 60_000), (28_000, 90_000)]);
//! # Ok::<(), chaos::server_clock::BadFault>(())
//! ```

use std::{fmt, path::PathBuf, str::FromStr, time::Duration};

use crate::{
    check::{
        Report,
        overlap::{Overlap, overlaps},
    },
    event::{Event, Record},
};

/// How often a strobe flips the server clock: not a divisor of the
/// elections' 1 s poll and renewal periods, so that their reads do not
/// all fall in one half of the strobe (with 100 ms they did: a waiting
/// contender's every attempt met the true clock).
pub const STROBE_FLIP: Duration = Duration::from_millis(130);

/// A server clock fault, as `--server-clock` names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ServerClockFault {
    /// `step:+30s` / `step:-30s`: the clock jumps by this many ms,
    /// repeatedly (each step adds to the last).
    Step {
        /// The step, in ms (negative: backwards).
        by_ms: i64,
    },
    /// `strobe` (`strobe:30s`): for windows of `2 d`, the clock flips
    /// between `+delta` and true time every [`STROBE_FLIP`].
    Strobe {
        /// How far ahead the clock is in its fast half, in ms.
        delta_ms: i64,
    },
}

/// A `--server-clock` value that is not a fault.
#[derive(Debug, thiserror::Error)]
#[error(
    "{0:?} is not a server clock fault: expected step:+<duration>, step:-<duration>, strobe or strobe:<duration> (e.g. step:+30s)"
)]
pub struct BadFault(String);

/// The default strobe delta.
const DEFAULT_STROBE_MS: i64 = 30_000;

/// A positive duration (`30s`, `1m`, `1500ms`: `humantime`) in ms.
fn parse_ms(text: &str) -> Option<i64> {
    let d = humantime::parse_duration(text.trim()).ok()?;
    i64::try_from(d.as_millis()).ok().filter(|ms| *ms > 0)
}

impl FromStr for ServerClockFault {
    type Err = BadFault;

    fn from_str(text: &str) -> Result<Self, BadFault> {
        let bad = || BadFault(text.to_string());
        if text == "strobe" {
            return Ok(ServerClockFault::Strobe {
                delta_ms: DEFAULT_STROBE_MS,
            });
        }
        if let Some(delta) = text.strip_prefix("strobe:") {
            let delta_ms = parse_ms(delta.strip_prefix('+').unwrap_or(delta)).ok_or_else(bad)?;
            return Ok(ServerClockFault::Strobe { delta_ms });
        }
        let step = text.strip_prefix("step:").ok_or_else(bad)?;
        let by_ms = match step.split_at_checked(1) {
            Some(("+", rest)) => parse_ms(rest).ok_or_else(bad)?,
            Some(("-", rest)) => -parse_ms(rest).ok_or_else(bad)?,
            _ => return Err(bad()),
        };
        Ok(ServerClockFault::Step { by_ms })
    }
}

impl fmt::Display for ServerClockFault {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ServerClockFault::Step { by_ms } => write!(f, "step:{}", signed_secs(*by_ms)),
            ServerClockFault::Strobe { delta_ms } => write!(f, "strobe:{}", signed_secs(*delta_ms)),
        }
    }
}

/// `+30s`, `-1.5s`.
fn signed_secs(ms: i64) -> String {
    let sign = if ms < 0 { '-' } else { '+' };
    let abs = ms.unsigned_abs();
    match abs % 1000 {
        0 => format!("{sign}{}s", abs / 1000),
        frac => format!("{sign}{}.{frac:03}s", abs / 1000),
    }
}

fn ms(d: Duration) -> u64 {
    u64::try_from(d.as_millis()).unwrap_or(u64::MAX)
}

/// When the clock changes, as `(ms from the first leader, offset ms)`
/// pairs, for a run of `duration` on a lease `d`:
///
/// - a step first at `d`, then every `3 d` for a forward step, every
///   `3 d + |Δ|` for a backward one (so that each lengthened lease has run
///   out, and a takeover it delayed has happened, before the next);
/// - a strobe window of `2 d` first at `d`, flipping every
///   [`STROBE_FLIP`] (`+Δ`, `0`, `+Δ`, …, ending at `0`), then the next
///   window `2 d + Δ` after the last ended.
pub fn plan(fault: ServerClockFault, lease: Duration, duration: Duration) -> Vec<(u64, i64)> {
    let d = ms(lease);
    let end = ms(duration);
    let mut changes = Vec::new();
    match fault {
        ServerClockFault::Step { by_ms } => {
            let period = match by_ms < 0 {
                true => 3 * d + by_ms.unsigned_abs(),
                false => 3 * d,
            };
            let mut at = d;
            let mut offset = 0i64;
            while at <= end {
                offset = offset.saturating_add(by_ms);
                changes.push((at, offset));
                at += period.max(1);
            }
        }
        ServerClockFault::Strobe { delta_ms } => {
            let flip = ms(STROBE_FLIP);
            let window = 2 * d;
            let mut start = d;
            while start <= end {
                let mut at = start;
                let mut fast = true;
                while at < start + window {
                    changes.push((at, if fast { delta_ms } else { 0 }));
                    fast = !fast;
                    at += flip;
                }
                if changes.last().is_some_and(|(_, offset)| *offset != 0) {
                    changes.push((at, 0));
                }
                start = at + window + delta_ms.unsigned_abs();
            }
        }
    }
    changes
}

/// How much longer a takeover after a kill can take under `fault`: a
/// backward step, or a strobe's return to true time, lengthens the dead
/// holder's lease by `Δ`. A forward step only shortens leases.
pub fn takeover_slack(fault: ServerClockFault) -> Duration {
    match fault {
        ServerClockFault::Step { by_ms } if by_ms < 0 => {
            Duration::from_millis(by_ms.unsigned_abs())
        }
        ServerClockFault::Step { .. } => Duration::ZERO,
        ServerClockFault::Strobe { delta_ms } => Duration::from_millis(delta_ms.unsigned_abs()),
    }
}

/// The longest a holder can go on acting after a forward step of the
/// store server's clock let a rival acquire: until its next renewal, due
/// `d/4` after its last, has its answer (a storage call: at most the
/// election's call budget, `d/4`) — `d/2`, and never past its killer
/// deadline (`0.8 d`). See `docs/guarantees.md`, "Server clock steps".
pub fn overlap_bound(lease: Duration) -> Duration {
    lease / 2
}

/// A server clock fault and the file that carries it to the engine.
#[derive(Debug, Clone)]
pub struct ServerClock {
    /// The fault.
    pub fault: ServerClockFault,
    /// The file the engine's preload library reads.
    pub file: ClockFile,
}

impl ServerClock {
    /// Applies the [`plan`] for a run of `duration` on a lease `lease`,
    /// counted from now; `record` is called with each offset once it is in
    /// the file. A change that cannot be written is logged and skipped.
    ///
    /// A step is **aimed**: once its time has come it waits (up to `d/2`)
    /// until `renewed(since_ms)` says the leader has renewed since, and
    /// steps right after, so the holder's next renewal, which would find
    /// its lease gone, is a whole renewal interval away: the worst case
    /// for how long it acts on while a rival may acquire.
    pub async fn drive(
        &self,
        lease: Duration,
        duration: Duration,
        renewed: impl Fn(u64) -> bool,
        record: impl Fn(i64),
    ) {
        let start = tokio::time::Instant::now();
        for (at, offset) in plan(self.fault, lease, duration) {
            tokio::time::sleep_until(start + Duration::from_millis(at)).await;
            if let ServerClockFault::Step { .. } = self.fault {
                let since = crate::event::now_ms();
                let until = tokio::time::Instant::now() + lease / 2;
                while !renewed(since) && tokio::time::Instant::now() < until {
                    tokio::time::sleep(Duration::from_millis(5)).await;
                }
            }
            match self.file.set(offset).await {
                Ok(()) => record(offset),
                Err(err) => tracing::warn!(
                    %err,
                    file = %self.file.path().display(),
                    "could not set the server clock offset"
                ),
            }
        }
    }
}

/// The times (ms) at which the server's clock moved forward, from the
/// [`Event::ServerClock`] records of `history` (the first change counts
/// from an offset of 0).
pub fn forward_changes(history: &[Record]) -> Vec<u64> {
    let mut changes: Vec<(u64, i64)> = history
        .iter()
        .filter_map(|r| match r.event {
            Event::ServerClock { offset_ms } => Some((r.t_ms, offset_ms)),
            _ => None,
        })
        .collect();
    changes.sort_by_key(|(t, _)| *t);
    let mut last = 0;
    let mut forward = Vec::new();
    for (t, offset) in changes {
        if offset > last {
            forward.push(t);
        }
        last = offset;
    }
    forward
}

/// Whether a forward change of the server's clock at one of `forward`
/// explains `overlap`: the successor acquired within `d + d/4` after it
/// (a lease cut short by the step ends at most `d` after the step; then
/// an acquisition retry, `d/20`, and the acquisition's calls).
pub fn explains(forward: &[u64], overlap: &Overlap, lease: Duration) -> bool {
    let window = ms(lease + lease / 4);
    forward
        .iter()
        .any(|s| *s <= overlap.acquired_ms && overlap.acquired_ms <= s.saturating_add(window))
}

/// Counts the overlapping leaders of `history` ([`overlaps`]) into
/// `report`: each is a violation unless a forward change of the server's
/// clock [`explains`] it and it lasted no longer than [`overlap_bound`].
pub fn count_overlaps(history: &[Record], lease: Duration, report: &mut Report) {
    let forward = forward_changes(history);
    report.server_clock_changes = history
        .iter()
        .filter(|r| matches!(r.event, Event::ServerClock { .. }))
        .count() as u64;
    let bound = overlap_bound(lease);
    for overlap in overlaps(history) {
        let length = Duration::from_millis(overlap.length_ms());
        report.overlaps += 1;
        report.worst_overlap = report.worst_overlap.max(Some(length));
        if !explains(&forward, &overlap, lease) {
            report
                .violations
                .push(format!("overlapping leaders: {overlap}"));
        } else if length > bound {
            report.violations.push(format!(
                "overlapping leaders after a server clock step, longer than the bound {bound:?}: {overlap}"
            ));
        } else {
            report.overlaps_server_clock += 1;
            report.within_limits.push(format!(
                "overlap after a server clock step (bound {bound:?}): {overlap}"
            ));
        }
    }
}

/// The file the engine's preload library reads its wall-clock offset
/// from: a signed decimal number of seconds (`+30.000`, `-1.500`), the
/// format of libfaketime's `FAKETIME` (and of the shim that stands in for
/// it), re-read on every clock read.
#[derive(Debug, Clone)]
pub struct ClockFile {
    path: PathBuf,
}

impl ClockFile {
    /// The file at `path` (written by [`ClockFile::set`]).
    pub fn new(path: impl Into<PathBuf>) -> Self {
        ClockFile { path: path.into() }
    }

    /// Where the file is.
    pub fn path(&self) -> &std::path::Path {
        &self.path
    }

    /// The file's text for an offset of `offset_ms`.
    pub fn text(offset_ms: i64) -> String {
        let sign = if offset_ms < 0 { '-' } else { '+' };
        let abs = offset_ms.unsigned_abs();
        format!("{sign}{}.{:03}\n", abs / 1000, abs % 1000)
    }

    /// Sets the offset: the new text is written beside the file and
    /// renamed over it, so a reader sees the old offset or the new one,
    /// never a mix. The file stays readable by every user (a server may
    /// run as another user, as PostgreSQL does under root).
    ///
    /// # Errors
    ///
    /// The file cannot be written or renamed.
    pub async fn set(&self, offset_ms: i64) -> std::io::Result<()> {
        let mut tmp = self.path.clone().into_os_string();
        tmp.push(".new");
        let tmp = PathBuf::from(tmp);
        tokio::fs::write(&tmp, Self::text(offset_ms)).await?;
        use std::os::unix::fs::PermissionsExt;
        tokio::fs::set_permissions(&tmp, std::fs::Permissions::from_mode(0o644)).await?;
        tokio::fs::rename(&tmp, &self.path).await
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const D: Duration = Duration::from_secs(4);

    #[test]
    fn faults_parse_and_print() {
        let parse = |s: &str| s.parse::<ServerClockFault>();
        assert_eq!(
            parse("step:+30s").unwrap(),
            ServerClockFault::Step { by_ms: 30_000 }
        );
        assert_eq!(
            parse("step:-30s").unwrap(),
            ServerClockFault::Step { by_ms: -30_000 }
        );
        assert_eq!(
            parse("step:+1500ms").unwrap(),
            ServerClockFault::Step { by_ms: 1_500 }
        );
        assert_eq!(
            parse("strobe").unwrap(),
            ServerClockFault::Strobe { delta_ms: 30_000 }
        );
        assert_eq!(
            parse("strobe:2m").unwrap(),
            ServerClockFault::Strobe { delta_ms: 120_000 }
        );
        for bad in [
            "step:30s",
            "step:+0s",
            "step:+",
            "jump:+30s",
            "strobe:",
            "step:+3x",
            "",
        ] {
            assert!(parse(bad).is_err(), "{bad}");
        }
        assert_eq!(parse("step:-30s").unwrap().to_string(), "step:-30s");
        assert_eq!(parse("step:+1500ms").unwrap().to_string(), "step:+1.500s");
    }

    #[test]
    fn backward_steps_are_spaced_so_each_lengthened_lease_runs_out() {
        let steps = plan(
            ServerClockFault::Step { by_ms: -30_000 },
            D,
            Duration::from_secs(90),
        );
        assert_eq!(
            steps,
            [(4_000, -30_000), (46_000, -60_000), (88_000, -90_000)]
        );
        assert_eq!(
            takeover_slack(ServerClockFault::Step { by_ms: -30_000 }),
            Duration::from_secs(30)
        );
        assert_eq!(
            takeover_slack(ServerClockFault::Step { by_ms: 30_000 }),
            Duration::ZERO
        );
    }

    #[test]
    fn a_strobe_flips_every_130_ms_for_two_leases_and_ends_on_true_time() {
        let fault = ServerClockFault::Strobe { delta_ms: 30_000 };
        let changes = plan(fault, D, Duration::from_secs(30));
        // One window in 30 s: 4 s to 12 s, 62 flips, the last back to 0.
        assert_eq!(changes.len(), 62);
        assert_eq!(changes[0], (4_000, 30_000));
        assert_eq!(changes[1], (4_130, 0));
        assert_eq!(changes.last(), Some(&(11_930, 0)));
        assert!(changes.windows(2).all(|w| w[1].0 - w[0].0 == 130));
        let long = plan(fault, D, Duration::from_secs(60));
        // The next window starts 2 d + Δ = 38 s after the first ended.
        assert_eq!(long[62], (50_060, 30_000));
        assert_eq!(takeover_slack(fault), Duration::from_secs(30));
    }

    #[test]
    fn the_file_holds_signed_seconds() {
        assert_eq!(ClockFile::text(30_000), "+30.000\n");
        assert_eq!(ClockFile::text(-1_500), "-1.500\n");
        assert_eq!(ClockFile::text(0), "+0.000\n");
        assert_eq!(overlap_bound(D), Duration::from_secs(2));
    }

    #[test]
    fn only_an_acquisition_soon_after_a_forward_change_is_explained() {
        let clock = |t, offset_ms| Record::new(t, "server", Event::ServerClock { offset_ms });
        let history = vec![
            clock(10_000, 30_000),
            clock(10_100, 0),
            clock(10_200, 30_000),
            clock(20_000, -30_000),
        ];
        assert_eq!(forward_changes(&history), [10_000, 10_200]);
        let overlap = |acquired_ms| Overlap {
            holder: "c0.1".into(),
            token: 1,
            successor: "c1.1".into(),
            successor_token: 2,
            acquired_ms,
            last_write_ms: acquired_ms + 500,
        };
        assert!(explains(&[10_000, 10_200], &overlap(10_050), D));
        assert!(explains(&[10_000, 10_200], &overlap(15_200), D));
        assert!(!explains(&[10_000, 10_200], &overlap(15_300), D));
        assert!(!explains(&[10_000, 10_200], &overlap(9_000), D));
        // backward steps explain nothing
        assert!(forward_changes(&[clock(1_000, -30_000)]).is_empty());
    }

    #[test]
    fn overlaps_are_violations_unless_a_forward_step_explains_them_within_the_bound() {
        let write = |start_ms| Event::Write {
            start_ms,
            token: 1,
            outcome: crate::event::WriteOutcome::Failed,
        };
        let history = |last_write_ms| {
            vec![
                Record::new(1_000, "c0.1", Event::Acquired { token: 1 }),
                Record::new(2_000, "server", Event::ServerClock { offset_ms: 30_000 }),
                Record::new(2_100, "c1.1", Event::Acquired { token: 2 }),
                Record::new(last_write_ms, "c0.1", write(last_write_ms)),
            ]
        };
        let mut within = Report::default();
        count_overlaps(&history(2_900), D, &mut within);
        assert_eq!((within.overlaps, within.overlaps_server_clock), (1, 1));
        assert_eq!(within.server_clock_changes, 1);
        assert!(within.ok(), "{within}");
        let mut longer = Report::default();
        count_overlaps(&history(4_200), D, &mut longer);
        assert_eq!(longer.overlaps_server_clock, 0);
        assert!(
            longer.violations[0].contains("longer than the bound"),
            "{longer}"
        );
        // Without the step, the same overlap is a plain violation.
        let mut plain = Report::default();
        let no_step: Vec<Record> = history(2_900)
            .into_iter()
            .filter(|r| r.proc != "server")
            .collect();
        count_overlaps(&no_step, D, &mut plain);
        assert!(
            plain.violations[0].starts_with("overlapping leaders: c0.1"),
            "{plain}"
        );
    }

    #[tokio::test]
    async fn set_replaces_the_file_whole() {
        let dir = std::env::temp_dir().join(format!("chaos-clock-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = ClockFile::new(dir.join("offset"));
        file.set(30_000).await.unwrap();
        assert_eq!(std::fs::read_to_string(file.path()).unwrap(), "+30.000\n");
        file.set(-30_000).await.unwrap();
        assert_eq!(std::fs::read_to_string(file.path()).unwrap(), "-30.000\n");
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
