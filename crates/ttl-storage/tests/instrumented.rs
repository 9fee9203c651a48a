//! The [`Instrumented`] decorator over the in-memory driver counts
//! operations, outcomes and errors, and forwards `watch`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;

use metrics_snapshot::Snapshot;
use storage_mem::MemStorage;
use ttl_storage::{DynTtlStorage, Instrumented, Key, MAX_VALUE_LEN, Ttl, TtlStorage};

#[test]
fn counts_operations_outcomes_and_errors() {
    let snapshot = Snapshot::of(async {
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
    let ops = "ttl_storage_operations_total";
    let insert = ("op", "insert_if_not_exists");
    let cas = ("op", "compare_and_swap");
    let get = ("op", "get");
    assert_eq!(snapshot.counter(ops, &[insert, ("outcome", "applied")]), 1);
    assert_eq!(
        snapshot.counter(ops, &[insert, ("outcome", "not_applied")]),
        1
    );
    assert_eq!(snapshot.counter(ops, &[insert, ("outcome", "error")]), 1);
    assert_eq!(snapshot.counter(ops, &[cas, ("outcome", "applied")]), 1);
    assert_eq!(snapshot.counter(ops, &[cas, ("outcome", "not_applied")]), 1);
    assert_eq!(snapshot.counter(ops, &[get, ("outcome", "found")]), 1);
    assert_eq!(snapshot.counter(ops, &[get, ("outcome", "absent")]), 1);
    assert_eq!(
        snapshot.counter(ops, &[("op", "compare_and_delete"), ("outcome", "applied")]),
        1
    );
    assert_eq!(
        snapshot.counter(
            "ttl_storage_errors_total",
            &[insert, ("kind", "permanent"), ("store", "mem")]
        ),
        1
    );
    assert_eq!(
        snapshot.counter("ttl_storage_errors_total", &[cas]),
        0,
        "no swap failed"
    );
    assert_eq!(
        snapshot.counter("ttl_storage_watches_total", &[("outcome", "armed")]),
        1
    );
    // One latency sample per operation, errors included.
    assert_eq!(
        snapshot
            .samples(
                "ttl_storage_operation_seconds",
                &[insert, ("outcome", "applied")]
            )
            .len(),
        1
    );
    assert_eq!(
        snapshot
            .samples(
                "ttl_storage_operation_seconds",
                &[insert, ("outcome", "error")]
            )
            .len(),
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
    let key = Key::new("k").unwrap();
    let snapshot = Snapshot::of(async {
        assert!(Instrumented::new(NoWatch, "none").watch(&key).is_err());
    });
    assert_eq!(
        snapshot.counter(
            "ttl_storage_watches_total",
            &[("outcome", "unsupported"), ("store", "none")]
        ),
        1
    );
}
