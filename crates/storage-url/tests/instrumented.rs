//! `storage_url::open` returns an instrumented store that still forwards
//! the driver's optional `watch`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use metrics_snapshot::Snapshot;
use ttl_storage::{Key, Ttl};

#[test]
fn opened_stores_are_instrumented_and_keep_watch() {
    let dir = tempfile::tempdir().unwrap();
    let redb = format!("redb://{}", dir.path().join("x.redb").display());
    let snapshot = Snapshot::of(async {
        let key = Key::new("k").unwrap();
        for url in ["mem", redb.as_str()] {
            let storage = storage_url::open(url).await.unwrap();
            assert!(
                storage
                    .insert_if_not_exists(&key, b"v", Ttl::from_secs(5).unwrap())
                    .await
                    .unwrap()
            );
            // Both drivers can watch; the wrapper must not hide it.
            assert!(storage.watch(&key).is_ok(), "{url}: watch lost");
        }
    });
    let counted = |store| snapshot.counter("ttl_storage_operations_total", &[("store", store)]);
    assert_eq!(counted("mem"), 1);
    assert_eq!(counted("redb"), 1);
}
