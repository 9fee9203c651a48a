//! The metrics elections record, through the `metrics` facade (the program
//! installs a recorder and an exporter; without one they cost next to
//! nothing). Every metric carries the election `key` as a label.
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `elections_leader` | gauge | `key` | 1 while this process holds the leadership (set at acquisition and at every renewal); 0 once it is lost or released, and after every attempt that did not acquire it (a standby) |
//! | `elections_acquisitions_total` | counter | `key` | leaderships acquired |
//! | `elections_acquisition_attempts_total` | counter | `key`, `outcome` | acquisition attempts: `acquired`, `held_by_other`, `error` |
//! | `elections_losses_total` | counter | `key`, `cause` | leaderships lost, by [`EndReason::label`]: `stolen`, `expired`, `store_unavailable`, `elections_dropped` |
//! | `elections_releases_total` | counter | `key`, `cause` | leaderships ended by their owner: `released`, `superseded` (handed over) |
//! | `elections_renewal_failures_total` | counter | `key`, `kind` | failed renewal attempts, by error kind (`transient`, `permanent`, `outcome_unknown`; a call that overran its timeout is `outcome_unknown`) |
//! | `elections_renewal_seconds` | histogram | `key` | duration of each renewal attempt (the compare-and-swap), however it ended |
//! | `elections_renewal_slack_seconds` | histogram | `key` | at each successful renewal, the time that was left before the killer deadline in force (negative: the deadline had passed) |
//! | `elections_killer_fired_total` | counter | `key` | killer deadlines that passed while armed |
//! | `elections_acquisitions_shed_total` | counter | — | acquisition attempts refused at once because renewals were falling behind ([`crate::load`]) |

use std::time::Duration;

use ttl_storage::{ErrorKind, Key};

use crate::EndReason;

/// Metric names, for programs and tests that look them up.
pub mod names {
    /// Gauge: 1 while leading.
    pub const LEADER: &str = "elections_leader";
    /// Counter: leaderships acquired.
    pub const ACQUISITIONS_TOTAL: &str = "elections_acquisitions_total";
    /// Counter: acquisition attempts by outcome.
    pub const ACQUISITION_ATTEMPTS_TOTAL: &str = "elections_acquisition_attempts_total";
    /// Counter: leaderships lost, by cause.
    pub const LOSSES_TOTAL: &str = "elections_losses_total";
    /// Counter: leaderships released.
    pub const RELEASES_TOTAL: &str = "elections_releases_total";
    /// Counter: failed renewal attempts, by error kind.
    pub const RENEWAL_FAILURES_TOTAL: &str = "elections_renewal_failures_total";
    /// Histogram: renewal attempt durations, in seconds.
    pub const RENEWAL_SECONDS: &str = "elections_renewal_seconds";
    /// Histogram: slack before the killer deadline at each renewal, in seconds.
    pub const RENEWAL_SLACK_SECONDS: &str = "elections_renewal_slack_seconds";
    /// Counter: killer deadlines that passed.
    pub const KILLER_FIRED_TOTAL: &str = "elections_killer_fired_total";
    /// Counter: acquisitions refused because renewals fell behind.
    pub const ACQUISITIONS_SHED_TOTAL: &str = "elections_acquisitions_shed_total";
}

/// Describes every metric above to the installed recorder (units and the
/// `# HELP` lines a Prometheus exporter prints). Call once after installing
/// a recorder; harmless without one.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_gauge, describe_histogram};
    describe_gauge!(
        names::LEADER,
        "1 while this process holds the leadership of the key"
    );
    describe_counter!(names::ACQUISITIONS_TOTAL, "Leaderships acquired");
    describe_counter!(
        names::ACQUISITION_ATTEMPTS_TOTAL,
        "Acquisition attempts, by outcome (acquired, held_by_other, error)"
    );
    describe_counter!(
        names::LOSSES_TOTAL,
        "Leaderships lost, by cause (stolen, expired, store_unavailable, elections_dropped)"
    );
    describe_counter!(
        names::RELEASES_TOTAL,
        "Leaderships ended by their owner, by cause (released, superseded)"
    );
    describe_counter!(
        names::RENEWAL_FAILURES_TOTAL,
        "Failed renewal attempts, by error kind (transient, permanent, outcome_unknown)"
    );
    describe_histogram!(
        names::RENEWAL_SECONDS,
        Unit::Seconds,
        "Duration of each renewal attempt (the compare-and-swap)"
    );
    describe_histogram!(
        names::RENEWAL_SLACK_SECONDS,
        Unit::Seconds,
        "Time left before the killer deadline at each successful renewal (negative: passed)"
    );
    describe_counter!(
        names::KILLER_FIRED_TOTAL,
        "Killer deadlines that passed while armed"
    );
    describe_counter!(
        names::ACQUISITIONS_SHED_TOTAL,
        "Acquisition attempts refused at once because renewals were falling behind"
    );
}

/// One acquisition attempt refused because renewals fell behind. No key
/// label: under overload the label set must not grow.
pub(crate) fn shed() {
    metrics::counter!(names::ACQUISITIONS_SHED_TOTAL).increment(1);
}

fn key_label(key: &Key) -> String {
    key.as_str().to_owned()
}

/// The leader gauge of `key`.
pub(crate) fn leading(key: &Key, leading: bool) {
    metrics::gauge!(names::LEADER, "key" => key_label(key)).set(if leading { 1.0 } else { 0.0 });
}

/// One acquisition attempt ended with `outcome`. An attempt that did not
/// acquire sets the leader gauge to 0, so a standby reports 0 (not nothing)
/// for the keys it tries.
pub(crate) fn attempt(key: &Key, outcome: &'static str) {
    metrics::counter!(names::ACQUISITION_ATTEMPTS_TOTAL, "key" => key_label(key), "outcome" => outcome)
        .increment(1);
    if outcome != "acquired" {
        leading(key, false);
    }
}

/// A leadership was acquired.
pub(crate) fn acquired(key: &Key) {
    metrics::counter!(names::ACQUISITIONS_TOTAL, "key" => key_label(key)).increment(1);
    leading(key, true);
}

/// A leadership was lost.
pub(crate) fn lost(key: &Key, reason: &EndReason) {
    let cause = reason.label();
    metrics::counter!(names::LOSSES_TOTAL, "key" => key_label(key), "cause" => cause).increment(1);
    leading(key, false);
}

/// A leadership was released by its owner (`cause` `released`) or handed
/// over (`superseded`).
pub(crate) fn released(key: &Key, reason: &EndReason) {
    metrics::counter!(names::RELEASES_TOTAL, "key" => key_label(key), "cause" => reason.label())
        .increment(1);
    leading(key, false);
}

/// The per-renewal metrics of one leadership, registered once when it
/// starts: a renewal records through these handles and builds no label
/// set (a recorder installed after a leadership started records nothing
/// for its renewals).
pub(crate) struct RenewalMetrics {
    seconds: metrics::Histogram,
    slack: metrics::Histogram,
    leader: metrics::Gauge,
}

impl RenewalMetrics {
    /// Registers the handles of `key`.
    pub(crate) fn new(key: &Key) -> Self {
        Self {
            seconds: metrics::histogram!(names::RENEWAL_SECONDS, "key" => key_label(key)),
            slack: metrics::histogram!(names::RENEWAL_SLACK_SECONDS, "key" => key_label(key)),
            leader: metrics::gauge!(names::LEADER, "key" => key_label(key)),
        }
    }

    /// One renewal attempt of `key` took `elapsed`; `error` is its failure,
    /// if any.
    pub(crate) fn attempt(&self, key: &Key, elapsed: Duration, error: Option<ErrorKind>) {
        self.seconds.record(elapsed.as_secs_f64());
        if let Some(kind) = error {
            let kind = match kind {
                ErrorKind::Transient => "transient",
                ErrorKind::Permanent => "permanent",
                ErrorKind::OutcomeUnknown => "outcome_unknown",
            };
            metrics::counter!(names::RENEWAL_FAILURES_TOTAL, "key" => key_label(key), "kind" => kind)
                .increment(1);
        }
    }

    /// A renewal succeeded with `slack` seconds left before the killer
    /// deadline: the slack is recorded and the leader gauge set.
    pub(crate) fn renewed(&self, slack: Option<f64>) {
        if let Some(slack) = slack {
            self.slack.record(slack);
        }
        self.leader.set(1.0);
    }
}

/// The killer deadline of `key` passed.
pub(crate) fn killer_fired(key: &Key) {
    metrics::counter!(names::KILLER_FIRED_TOTAL, "key" => key_label(key)).increment(1);
}
