//! [`Instrumented`]: a decorator that measures every operation of any
//! [`TtlStorage`] with the `metrics` facade and a `tracing` span, so
//! drivers need no instrumentation of their own.
//!
//! Metrics (the program installs the recorder; none is installed here):
//!
//! | name | type | labels | meaning |
//! |---|---|---|---|
//! | `ttl_storage_operation_seconds` | histogram | `store`, `op`, `outcome` | time an operation took, however it ended |
//! | `ttl_storage_operations_total` | counter | `store`, `op`, `outcome` | operations completed |
//! | `ttl_storage_errors_total` | counter | `store`, `op`, `kind` | operations that failed, by [`ErrorKind`] |
//! | `ttl_storage_watches_total` | counter | `store`, `outcome` | [`TtlStorage::watch`] calls: `armed` or `unsupported` |
//!
//! `op` is `insert_if_not_exists`, `compare_and_swap`, `compare_and_delete`
//! or `get`; `outcome` is `applied` / `not_applied` for the conditional
//! writes, `found` / `absent` for `get`, and `error`; `kind` is
//! `transient`, `permanent` or `outcome_unknown`.
//!
//! Each operation runs in a `debug`-level span `ttl_storage` with the
//! fields `store`, `op`, `key` and `outcome` (recorded when it ends).
//!
//! The histogram and counter of each (`op`, `outcome`) are registered with
//! the recorder once, at their first use, and kept: install the recorder
//! before the storage's first operation (a renewal is one operation, and a
//! process holding many leaderships makes hundreds of thousands a second).
//! Values are never logged.

use std::{
    sync::{Arc, OnceLock},
    time::Instant,
};

use async_trait::async_trait;
use tracing::Instrument;

use crate::{
    Counted, CountedWrite, Entry, ErrorKind, Key, Result, StorageError, Ttl, TtlStorage, Watch,
    WatchUnsupported,
};

/// Metric names, for programs and tests that look them up.
pub mod names {
    /// Histogram of operation durations, in seconds.
    pub const OPERATION_SECONDS: &str = "ttl_storage_operation_seconds";
    /// Counter of completed operations.
    pub const OPERATIONS_TOTAL: &str = "ttl_storage_operations_total";
    /// Counter of failed operations, by error kind.
    pub const ERRORS_TOTAL: &str = "ttl_storage_errors_total";
    /// Counter of `watch` calls.
    pub const WATCHES_TOTAL: &str = "ttl_storage_watches_total";
}

/// Describes the metrics above to the installed recorder (units and the
/// `# HELP` lines a Prometheus exporter prints). Call once after installing
/// a recorder; harmless without one.
pub fn describe() {
    use metrics::{Unit, describe_counter, describe_histogram};
    describe_histogram!(
        names::OPERATION_SECONDS,
        Unit::Seconds,
        "Duration of each storage operation, by store, operation and outcome"
    );
    describe_counter!(
        names::OPERATIONS_TOTAL,
        "Storage operations completed, by store, operation and outcome"
    );
    describe_counter!(
        names::ERRORS_TOTAL,
        "Storage operations that failed, by store, operation and error kind"
    );
    describe_counter!(
        names::WATCHES_TOTAL,
        "Watch calls, by store and outcome (armed, unsupported)"
    );
}

/// Wraps any [`TtlStorage`] and records metrics and a tracing span for
/// every operation (see the [module documentation](self)). Every method of
/// the trait is forwarded, the optional [`TtlStorage::watch`] included, so
/// wrapping never hides a capability of the driver.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), ttl_storage::StorageError> {
/// use ttl_storage::{Instrumented, Key, Ttl, TtlStorage};
/// # struct Driver;
/// # #[async_trait::async_trait]
/// # impl TtlStorage for Driver {
/// #     async fn insert_if_not_exists(&self, _: &Key, _: &[u8], _: Ttl) -> ttl_storage::Result<bool> { Ok(true) }
/// #     async fn compare_and_swap(&self, _: &Key, _: &[u8], _: &[u8], _: Ttl) -> ttl_storage::Result<bool> { Ok(true) }
/// #     async fn compare_and_delete(&self, _: &Key, _: &[u8]) -> ttl_storage::Result<bool> { Ok(true) }
/// #     async fn get(&self, _: &Key) -> ttl_storage::Result<Option<Vec<u8>>> { Ok(None) }
/// # }
/// let storage = Instrumented::new(Driver, "mydriver");
/// let key = Key::new("leader")?;
/// storage.insert_if_not_exists(&key, b"node-1", Ttl::from_secs(20)?).await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct Instrumented<S> {
    inner: S,
    store: &'static str,
    /// The handles of every (`op`, `outcome`), registered at first use.
    handles: Arc<Handles>,
}

/// Operations, in the order of [`Handles`]' rows.
const OPS: [&str; 5] = [
    "insert_if_not_exists",
    "compare_and_swap",
    "compare_and_delete",
    "get",
    "write_counted",
];

/// Outcomes, in the order of [`Handles`]' columns.
const OUTCOMES: [&str; 6] = [
    "applied",
    "not_applied",
    "found",
    "absent",
    "unsupported",
    "error",
];

// Indexes into OPS and OUTCOMES.
const INSERT: usize = 0;
const SWAP: usize = 1;
const DELETE: usize = 2;
const GET: usize = 3;
const COUNTED: usize = 4;
const APPLIED: usize = 0;
const NOT_APPLIED: usize = 1;
const FOUND: usize = 2;
const ABSENT: usize = 3;
const UNSUPPORTED: usize = 4;
const ERROR: usize = 5;

/// The duration histogram and the count of one (`op`, `outcome`).
#[derive(Debug)]
struct Measures {
    seconds: metrics::Histogram,
    total: metrics::Counter,
}

/// [`Measures`] by operation and outcome, each registered at first use.
#[derive(Debug, Default)]
struct Handles([[OnceLock<Measures>; OUTCOMES.len()]; OPS.len()]);

impl Handles {
    /// The measures of `op` ending in `outcome` in `store`.
    fn get(&self, store: &'static str, op: usize, outcome: usize) -> Option<&Measures> {
        let slot = self.0.get(op)?.get(outcome)?;
        let (op, outcome) = (*OPS.get(op)?, *OUTCOMES.get(outcome)?);
        Some(slot.get_or_init(|| {
            let labels = [("store", store), ("op", op), ("outcome", outcome)];
            Measures {
                seconds: metrics::histogram!(names::OPERATION_SECONDS, &labels),
                total: metrics::counter!(names::OPERATIONS_TOTAL, &labels),
            }
        }))
    }
}

impl<S> Instrumented<S> {
    /// Wraps `inner`; `store` names the engine in the `store` label
    /// (`redb`, `valkey`, ...): keep it to a small fixed set.
    pub fn new(inner: S, store: &'static str) -> Self {
        Instrumented {
            inner,
            store,
            handles: Arc::default(),
        }
    }

    /// The wrapped storage.
    pub fn inner(&self) -> &S {
        &self.inner
    }

    /// Unwraps the storage.
    pub fn into_inner(self) -> S {
        self.inner
    }

    /// The `store` label.
    pub fn store(&self) -> &'static str {
        self.store
    }

    /// Runs `operation` in a span and records its duration and outcome.
    async fn measure<T>(
        &self,
        op_index: usize,
        key: &Key,
        outcome_of: impl FnOnce(&T) -> usize,
        operation: impl Future<Output = Result<T>>,
    ) -> Result<T> {
        let op = OPS.get(op_index).copied().unwrap_or("unknown");
        let span = tracing::debug_span!(
            "ttl_storage",
            store = self.store,
            op,
            key = %key,
            outcome = tracing::field::Empty,
        );
        let started = Instant::now();
        let result = operation.instrument(span.clone()).await;
        let elapsed = started.elapsed().as_secs_f64();
        let outcome = match &result {
            Ok(value) => outcome_of(value),
            Err(_) => ERROR,
        };
        span.record(
            "outcome",
            OUTCOMES.get(outcome).copied().unwrap_or("unknown"),
        );
        if let Some(measures) = self.handles.get(self.store, op_index, outcome) {
            measures.seconds.record(elapsed);
            measures.total.increment(1);
        }
        if let Err(err) = &result {
            let kind = kind_label(err);
            metrics::counter!(names::ERRORS_TOTAL, "store" => self.store, "op" => op, "kind" => kind)
                .increment(1);
            span.in_scope(|| tracing::debug!(error = %err, kind, "storage operation failed"));
        }
        result
    }
}

/// The `kind` label of an error.
fn kind_label(err: &StorageError) -> &'static str {
    match err.kind() {
        ErrorKind::Transient => "transient",
        ErrorKind::Permanent => "permanent",
        ErrorKind::OutcomeUnknown => "outcome_unknown",
    }
}

fn applied(done: &bool) -> usize {
    if *done { APPLIED } else { NOT_APPLIED }
}

fn found<T>(value: &Option<T>) -> usize {
    if value.is_some() { FOUND } else { ABSENT }
}

#[async_trait]
impl<S: TtlStorage> TtlStorage for Instrumented<S> {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        self.measure(
            INSERT,
            key,
            applied,
            self.inner.insert_if_not_exists(key, value, ttl),
        )
        .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        self.measure(
            SWAP,
            key,
            applied,
            self.inner.compare_and_swap(key, old, new, ttl),
        )
        .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        self.measure(
            DELETE,
            key,
            applied,
            self.inner.compare_and_delete(key, value),
        )
        .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.measure(GET, key, found, self.inner.get(key)).await
    }

    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        self.measure(GET, key, found, self.inner.get_entry(key))
            .await
    }

    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        self.measure(
            COUNTED,
            write.key,
            |counted: &Counted| match counted {
                Counted::Written(_) => APPLIED,
                Counted::Refused => NOT_APPLIED,
                Counted::Unsupported => UNSUPPORTED,
            },
            self.inner.write_counted(write),
        )
        .await
    }

    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        let watch = self.inner.watch(key);
        let outcome = if watch.is_ok() {
            "armed"
        } else {
            "unsupported"
        };
        metrics::counter!(names::WATCHES_TOTAL, "store" => self.store, "outcome" => outcome)
            .increment(1);
        watch
    }

    fn changes(
        &self,
        key: &Key,
        counter: Option<&Key>,
    ) -> std::result::Result<crate::Changes, crate::ChangesUnsupported> {
        self.inner.changes(key, counter)
    }
}
