//! The metrics cluster events record, through the `metrics` facade (the
//! program installs a recorder and an exporter; `docs/metrics.md`).
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `coordinator_events_published_total` | counter | `outcome` | `publish` calls: `ok`, `error` (Valkey unreachable or refused: delivered nowhere, or, when the answer was lost, possibly everywhere), `refused` (payload too large) |
//! | `coordinator_events_delivered_total` | counter | | events handed to local subscribers (one per subscriber) |
//! | `coordinator_events_dropped_total` | counter | `reason` | events this pod dropped: `lagged` (a subscriber fell more than the buffer behind; one per subscriber and event), `malformed` (a channel message that does not parse), `unsubscribed` (a message for a destination with no local subscriber), `overflow` (the Valkey client's message queue overflowed) |
//! | `coordinator_events_missed_total` | counter | | events this pod never received, found by their numbers (a cut from Valkey, a lost message): each is reported to its subscribers as a gap |
//! | `coordinator_events_unreached_total` | counter | | at publish: pods the subscription map lists as subscribed that the broadcast did not reach (cut from Valkey, or dead within their TTL) |
//! | `coordinator_events_subscribers` | gauge | | local subscribers on this pod |
//! | `coordinator_events_destinations` | gauge | | destinations with local subscribers on this pod |
//! | `coordinator_events_broadcast_seconds` | histogram | | publish-to-receipt latency of each event this pod received over the broadcast channel (the publisher's clock against this pod's) |
//! | `coordinator_events_interruptions_total` | counter | | times this pod lost its broadcast channel |
//! | `coordinator_events_valkey_errors_total` | counter | `op` | failed Valkey calls: `publish`, `subscribe`, `unsubscribe`, `renew`, `resume`, `probe` |

use std::time::Duration;

/// Metric names, for programs and tests that look them up.
pub mod names {
    /// Counter: `publish` calls by outcome.
    pub const PUBLISHED_TOTAL: &str = "coordinator_events_published_total";
    /// Counter: events handed to local subscribers.
    pub const DELIVERED_TOTAL: &str = "coordinator_events_delivered_total";
    /// Counter: events dropped, by reason.
    pub const DROPPED_TOTAL: &str = "coordinator_events_dropped_total";
    /// Counter: events never received, found by their numbers.
    pub const MISSED_TOTAL: &str = "coordinator_events_missed_total";
    /// Counter: subscribed pods a publish did not reach.
    pub const UNREACHED_TOTAL: &str = "coordinator_events_unreached_total";
    /// Gauge: local subscribers.
    pub const SUBSCRIBERS: &str = "coordinator_events_subscribers";
    /// Gauge: destinations with local subscribers.
    pub const DESTINATIONS: &str = "coordinator_events_destinations";
    /// Histogram: publish-to-receipt latency, seconds.
    pub const BROADCAST_SECONDS: &str = "coordinator_events_broadcast_seconds";
    /// Counter: broadcast channel losses.
    pub const INTERRUPTIONS_TOTAL: &str = "coordinator_events_interruptions_total";
    /// Counter: failed Valkey calls, by operation.
    pub const VALKEY_ERRORS_TOTAL: &str = "coordinator_events_valkey_errors_total";
}

pub(crate) fn published_outcome(outcome: &'static str) {
    metrics::counter!(names::PUBLISHED_TOTAL, "outcome" => outcome).increment(1);
}

pub(crate) fn delivered() {
    metrics::counter!(names::DELIVERED_TOTAL).increment(1);
}

pub(crate) fn dropped(reason: &'static str, n: u64) {
    metrics::counter!(names::DROPPED_TOTAL, "reason" => reason).increment(n);
}

pub(crate) fn missed(n: u64) {
    metrics::counter!(names::MISSED_TOTAL).increment(n);
}

pub(crate) fn unreached(n: u64) {
    metrics::counter!(names::UNREACHED_TOTAL).increment(n);
}

pub(crate) fn subscribers(n: usize) {
    metrics::gauge!(names::SUBSCRIBERS).set(n as f64);
}

pub(crate) fn destinations(n: usize) {
    metrics::gauge!(names::DESTINATIONS).set(n as f64);
}

pub(crate) fn broadcast(latency: Duration) {
    metrics::histogram!(names::BROADCAST_SECONDS).record(latency.as_secs_f64());
}

pub(crate) fn interrupted() {
    metrics::counter!(names::INTERRUPTIONS_TOTAL).increment(1);
}

pub(crate) fn valkey_error(op: &'static str, err: &dyn std::fmt::Display) {
    tracing::warn!(op, %err, "cluster events: valkey call failed");
    metrics::counter!(names::VALKEY_ERRORS_TOTAL, "op" => op).increment(1);
}
