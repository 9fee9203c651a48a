//! The [`Instrumented`] decorator over the in-memory driver counts
//! operations, outcomes and errors, and forwards `watch`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};
use metrics_util::{CompositeKey, MetricKind};
use storage_mem::MemStorage;
use ttl_storage::{DynTtlStorage, Instrumented, Key, MAX_VALUE_LEN, Ttl, TtlStorage};

/// One snapshot of a debugging recorder (taking it resets the recorder).
struct Metrics(Vec<(CompositeKey, DebugValue)>);

impl Metrics {
    fn take(snapshotter: &Snapshotter) -> Self {
        Metrics(
            snapshotter
                .snapshot()
                .into_vec()
                .into_iter()
                .map(|(key, _, _, value)| (key, value))
                .collect(),
        )
    }
}

/// The value of the metric `name` of `kind` whose labels include `labels`.
fn value<'a>(
    snapshotter: &'a Metrics,
    kind: MetricKind,
    name: &str,
    labels: &[(&str, &str)],
) -> Option<&'a DebugValue> {
    snapshotter
        .0
        .iter()
        .find(|(key, _)| {
            key.kind() == kind
                && key.key().name() == name
                && labels.iter().all(|(k, v)| {
                    key.key()
                        .labels()
                        .any(|label| label.key() == *k && label.value() == *v)
                })
        })
        .map(|(_, value)| value)
}

fn counter(snapshotter: &Metrics, name: &str, labels: &[(&str, &str)]) -> u64 {
    match value(snapshotter, MetricKind::Counter, name, labels) {
        Some(DebugValue::Counter(n)) => *n,
        None => 0,
        Some(other) => panic!("{name} is not a counter: {other:?}"),
    }
}

fn samples(snapshotter: &Metrics, name: &str, labels: &[(&str, &str)]) -> usize {
    match value(snapshotter, MetricKind::Histogram, name, labels) {
        Some(DebugValue::Histogram(samples)) => samples.len(),
        None => 0,
        Some(other) => panic!("{name} is not a histogram: {other:?}"),
    }
}

#[test]
fn counts_operations_outcomes_and_errors() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
            let storage: DynTtlStorage = Arc::new(Instrumented::new(MemStorage::new(), "mem"));
            let key = Key::new("leader").unwrap();
            let ttl = Ttl::from_secs(20).unwrap();
            assert!(storage.insert_if_not_exists(&key, b"a", ttl).await.unwrap());
            assert!(!storage.insert_if_not_exists(&key, b"b", ttl).await.unwrap());
            assert!(
                storage
                    .compare_and_swap(&key, b"a", b"a", ttl)
                    .await
                    .unwrap()
            );
            assert!(
                !storage
                    .compare_and_swap(&key, b"x", b"a", ttl)
                    .await
                    .unwrap()
            );
            assert_eq!(storage.get(&key).await.unwrap().as_deref(), Some(&b"a"[..]));
            assert!(storage.compare_and_delete(&key, b"a").await.unwrap());
            assert_eq!(storage.get(&key).await.unwrap(), None);
            // Too long a value: the driver refuses it (a permanent error).
            let long = vec![0u8; MAX_VALUE_LEN + 1];
            assert!(
                storage
                    .insert_if_not_exists(&key, &long, ttl)
                    .await
                    .is_err()
            );
            // The driver's watch is forwarded: no record, so it completes at once.
            storage.watch(&key).expect("mem supports watch").await;
        });
    });

    // A snapshot drains the recorder: take one and read it all.
    let snapshot = Metrics::take(&snapshotter);
    let snapshotter = &snapshot;
    let ops = "ttl_storage_operations_total";
    let insert = ("op", "insert_if_not_exists");
    let cas = ("op", "compare_and_swap");
    let get = ("op", "get");
    assert_eq!(
        counter(snapshotter, ops, &[insert, ("outcome", "applied")]),
        1
    );
    assert_eq!(
        counter(snapshotter, ops, &[insert, ("outcome", "not_applied")]),
        1
    );
    assert_eq!(
        counter(snapshotter, ops, &[insert, ("outcome", "error")]),
        1
    );
    assert_eq!(counter(snapshotter, ops, &[cas, ("outcome", "applied")]), 1);
    assert_eq!(
        counter(snapshotter, ops, &[cas, ("outcome", "not_applied")]),
        1
    );
    assert_eq!(counter(snapshotter, ops, &[get, ("outcome", "found")]), 1);
    assert_eq!(counter(snapshotter, ops, &[get, ("outcome", "absent")]), 1);
    assert_eq!(
        counter(
            snapshotter,
            ops,
            &[("op", "compare_and_delete"), ("outcome", "applied")]
        ),
        1
    );
    assert_eq!(
        counter(
            snapshotter,
            "ttl_storage_errors_total",
            &[insert, ("kind", "permanent"), ("store", "mem")]
        ),
        1
    );
    assert_eq!(
        counter(snapshotter, "ttl_storage_errors_total", &[cas]),
        0,
        "no swap failed"
    );
    assert_eq!(
        counter(
            snapshotter,
            "ttl_storage_watches_total",
            &[("outcome", "armed")]
        ),
        1
    );
    // One latency sample per operation, errors included.
    assert_eq!(
        samples(
            snapshotter,
            "ttl_storage_operation_seconds",
            &[insert, ("outcome", "applied")]
        ),
        1
    );
    assert_eq!(
        samples(
            snapshotter,
            "ttl_storage_operation_seconds",
            &[insert, ("outcome", "error")]
        ),
        1
    );
}

/// A driver without `watch` stays one behind the decorator.
#[test]
fn unsupported_watch_is_reported_as_such() {
    struct NoWatch;
    #[async_trait::async_trait]
    impl TtlStorage for NoWatch {
        async fn insert_if_not_exists(
            &self,
            _: &Key,
            _: &[u8],
            _: Ttl,
        ) -> ttl_storage::Result<bool> {
            Ok(true)
        }
        async fn compare_and_swap(
            &self,
            _: &Key,
            _: &[u8],
            _: &[u8],
            _: Ttl,
        ) -> ttl_storage::Result<bool> {
            Ok(true)
        }
        async fn compare_and_delete(&self, _: &Key, _: &[u8]) -> ttl_storage::Result<bool> {
            Ok(true)
        }
        async fn get(&self, _: &Key) -> ttl_storage::Result<Option<Vec<u8>>> {
            Ok(None)
        }
    }
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let key = Key::new("k").unwrap();
    metrics::with_local_recorder(&recorder, || {
        assert!(Instrumented::new(NoWatch, "none").watch(&key).is_err());
    });
    assert_eq!(
        counter(
            &Metrics::take(&snapshotter),
            "ttl_storage_watches_total",
            &[("outcome", "unsupported"), ("store", "none")]
        ),
        1
    );
}
