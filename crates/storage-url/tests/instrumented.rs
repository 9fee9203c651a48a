//! `storage_url::open` returns an instrumented store that still forwards
//! the driver's optional `watch`.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use ttl_storage::{Key, Ttl};

#[test]
fn opened_stores_are_instrumented_and_keep_watch() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let redb = format!("redb://{}", dir.path().join("x.redb").display());
    metrics::with_local_recorder(&recorder, || {
        runtime.block_on(async {
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
    });
    // Taking a snapshot drains the recorder: take one and read it all.
    let snapshot = snapshotter.snapshot().into_vec();
    let counted = |store: &str| {
        snapshot
            .iter()
            .filter(|(key, _, _, _)| {
                key.key().name() == "ttl_storage_operations_total"
                    && key
                        .key()
                        .labels()
                        .any(|l| l.key() == "store" && l.value() == store)
            })
            .map(|(_, _, _, value)| match value {
                DebugValue::Counter(n) => *n,
                other => panic!("not a counter: {other:?}"),
            })
            .sum::<u64>()
    };
    assert_eq!(counted("mem"), 1);
    assert_eq!(counted("redb"), 1);
}
