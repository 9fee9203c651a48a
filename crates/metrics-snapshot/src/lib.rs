//! Tests' view of the metrics a piece of code recorded.
//!
//! A [`Snapshot`] is taken from a [`metrics_util`] debugging recorder
//! ([`Snapshotter`]); taking it drains the recorder's counters, so each
//! snapshot holds what was recorded since the one before. Metrics are
//! looked up by name and by labels they must include (other labels are
//! allowed): [`Snapshot::counter`] sums the matching counters,
//! [`Snapshot::gauge`] reads the first matching gauge, and
//! [`Snapshot::samples`] collects the samples of the matching histograms.
//!
//! ```
//! use metrics_snapshot::{DebuggingRecorder, Snapshot};
//!
//! let recorder = DebuggingRecorder::new();
//! let snapshotter = recorder.snapshotter();
//! metrics::with_local_recorder(&recorder, || {
//!     metrics::counter!("calls_total", "route" => "get", "outcome" => "ok").increment(2);
//!     metrics::counter!("calls_total", "route" => "put", "outcome" => "ok").increment(1);
//!     metrics::gauge!("leader", "key" => "k").set(1.0);
//! });
//! let snapshot = Snapshot::take(&snapshotter);
//! assert_eq!(snapshot.counter("calls_total", &[("outcome", "ok")]), 3);
//! assert_eq!(snapshot.counter("calls_total", &[("route", "get")]), 2);
//! assert_eq!(snapshot.gauge("leader", &[("key", "k")]), Some(1.0));
//! assert_eq!(snapshot.counter("calls_total", &[("outcome", "failed")]), 0);
//! ```
//!
//! [`Snapshot::of`] does the same for async work, on a runtime of its own:
//!
//! ```
//! let snapshot = metrics_snapshot::Snapshot::of(async {
//!     metrics::counter!("calls_total").increment(1);
//! });
//! assert_eq!(snapshot.counter("calls_total", &[]), 1);
//! ```

pub use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};

/// The metrics recorded since the last snapshot of the same recorder.
#[derive(Debug)]
pub struct Snapshot(Vec<(CompositeKey, DebugValue)>);

impl Snapshot {
    /// Runs `work` to completion on a current-thread runtime of its own,
    /// with a fresh debugging recorder installed for this thread, and
    /// returns everything it recorded.
    ///
    /// # Panics
    ///
    /// When the runtime cannot be built (a test helper: the test fails).
    pub fn of(work: impl std::future::Future<Output = ()>) -> Self {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap_or_else(|err| panic!("cannot build a runtime: {err}"));
        metrics::with_local_recorder(&recorder, || runtime.block_on(work));
        Self::take(&snapshotter)
    }

    /// Takes a snapshot (which drains the recorder's counters).
    pub fn take(snapshotter: &Snapshotter) -> Self {
        let metrics = snapshotter.snapshot().into_vec().into_iter();
        Snapshot(metrics.map(|(key, _, _, value)| (key, value)).collect())
    }

    /// The values of the metrics of `kind` named `name` whose labels
    /// include `labels`.
    pub fn matching<'a>(
        &'a self,
        kind: MetricKind,
        name: &'a str,
        labels: &'a [(&'a str, &'a str)],
    ) -> impl Iterator<Item = &'a DebugValue> {
        self.0
            .iter()
            .filter(move |(key, _)| {
                let has = |(k, v): &(&str, &str)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                };
                key.kind() == kind && key.key().name() == name && labels.iter().all(has)
            })
            .map(|(_, value)| value)
    }

    /// The sum of the counters `name` whose labels include `labels` (0 when
    /// there are none).
    pub fn counter(&self, name: &str, labels: &[(&str, &str)]) -> u64 {
        self.matching(MetricKind::Counter, name, labels)
            .filter_map(|value| match value {
                DebugValue::Counter(n) => Some(*n),
                _ => None,
            })
            .sum()
    }

    /// The first gauge `name` whose labels include `labels`, if any.
    pub fn gauge(&self, name: &str, labels: &[(&str, &str)]) -> Option<f64> {
        self.matching(MetricKind::Gauge, name, labels)
            .find_map(|value| match value {
                DebugValue::Gauge(v) => Some(v.into_inner()),
                _ => None,
            })
    }

    /// The samples of the histograms `name` whose labels include `labels`,
    /// in the order recorded (histogram after histogram).
    pub fn samples(&self, name: &str, labels: &[(&str, &str)]) -> Vec<f64> {
        self.matching(MetricKind::Histogram, name, labels)
            .flat_map(|value| match value {
                DebugValue::Histogram(samples) => samples.iter().map(|s| s.into_inner()).collect(),
                _ => Vec::new(),
            })
            .collect()
    }
}
