//! The shared mode: several handles (as several processes would) on one
//! file, the lock file, watching across handles, refused options.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::{sync::Arc, time::Duration};

use storage_redb::{OpenError, RedbStorage, SharedRedbStorage};
use ttl_storage::{Key, Ttl, TtlStorage};

fn key(name: &str) -> Key {
    Key::new(name).unwrap()
}

/// Generous bound for "woken by the event, not by the fallback": far below
/// the TTLs used, far above any scheduling stall.
const WAKE_BOUND: Duration = Duration::from_secs(20);

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn handles_on_one_file_see_each_other() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("s.redb");
    let a = SharedRedbStorage::open(&path).await.unwrap();
    let b = SharedRedbStorage::open(&path).await.unwrap();
    assert!(b.events_path().ends_with("s.redb.events"));
    let k = key("k");
    let ttl = Ttl::from_secs(60).unwrap();
    assert!(a.insert_if_not_exists(&k, b"a", ttl).await.unwrap());
    assert!(!b.insert_if_not_exists(&k, b"b", ttl).await.unwrap());
    assert_eq!(b.get(&k).await.unwrap(), Some(b"a".to_vec()));
    assert!(b.compare_and_swap(&k, b"a", b"b", ttl).await.unwrap());
    assert!(!a.compare_and_delete(&k, b"a").await.unwrap());
    assert!(a.compare_and_delete(&k, b"b").await.unwrap());
    assert_eq!(b.get(&k).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_inserts_from_many_handles_have_one_winner() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("race.redb");
    let mut handles = Vec::new();
    for _ in 0..4 {
        handles.push(SharedRedbStorage::open(&path).await.unwrap());
    }
    for round in 0..5 {
        let k = key(&format!("race/{round}"));
        let mut tasks = Vec::new();
        for (i, handle) in handles.iter().enumerate() {
            for j in 0..8 {
                let handle = handle.clone();
                let k = k.clone();
                tasks.push(tokio::spawn(async move {
                    let value = format!("{i}/{j}");
                    handle
                        .insert_if_not_exists(&k, value.as_bytes(), Ttl::NEVER)
                        .await
                        .unwrap()
                }));
            }
        }
        let mut winners = 0;
        for task in tasks {
            winners += usize::from(task.await.unwrap());
        }
        assert_eq!(winners, 1, "round {round}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_delete_in_one_handle_wakes_a_watch_in_another() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("w.redb");
    let a = SharedRedbStorage::open(&path).await.unwrap();
    let b = SharedRedbStorage::open(&path).await.unwrap();
    let k = key("k");
    assert!(
        a.insert_if_not_exists(&k, b"a", Ttl::from_secs(600).unwrap())
            .await
            .unwrap()
    );
    let watch = b.watch(&k).unwrap();
    let deleter = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(a.compare_and_delete(&k, b"a").await.unwrap());
    });
    tokio::time::timeout(WAKE_BOUND, watch)
        .await
        .expect("the delete did not wake the watch");
    deleter.await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_watch_wakes_at_expiry_and_at_once_when_absent() {
    let dir = tempfile::tempdir().unwrap();
    let storage = SharedRedbStorage::open(dir.path().join("e.redb"))
        .await
        .unwrap();
    let k = key("k");
    tokio::time::timeout(WAKE_BOUND, storage.watch(&k).unwrap())
        .await
        .expect("an absent key must not be waited for");
    assert!(
        storage
            .insert_if_not_exists(&k, b"a", Ttl::from_secs(1).unwrap())
            .await
            .unwrap()
    );
    tokio::time::timeout(WAKE_BOUND, storage.watch(&k).unwrap())
        .await
        .expect("the expiry did not wake the watch");
    // Woken by the expiry (nothing else happened): the record is gone.
    assert_eq!(storage.get(&k).await.unwrap(), None);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watching_can_be_turned_off() {
    let dir = tempfile::tempdir().unwrap();
    let storage = SharedRedbStorage::builder()
        .watch(false)
        .open(dir.path().join("n.redb"))
        .await
        .unwrap();
    assert!(storage.watch(&key("k")).is_err());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_sweep_expired_records() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("sw.redb");
    let storage = SharedRedbStorage::open(&path).await.unwrap();
    for i in 0..20 {
        let k = key(&format!("old/{i}"));
        assert!(
            storage
                .insert_if_not_exists(&k, b"x", Ttl::from_secs(1).unwrap())
                .await
                .unwrap()
        );
    }
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // Any write reclaims expired records in its transaction.
    assert!(
        storage
            .insert_if_not_exists(&key("new"), b"y", Ttl::NEVER)
            .await
            .unwrap()
    );
    storage.close().await.unwrap();
    // The single-process driver sees what is left: nothing to sweep.
    let single = RedbStorage::builder()
        .without_sweep()
        .open(&path)
        .await
        .unwrap();
    assert_eq!(single.sweep_now(1000).await.unwrap(), 0);
    assert_eq!(single.get(&key("new")).await.unwrap(), Some(b"y".to_vec()));
    single.close().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_file_held_by_the_single_process_driver_is_reported() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("held.redb");
    let single = RedbStorage::open(&path).await.unwrap();
    let err = SharedRedbStorage::open(&path).await.unwrap_err();
    assert!(matches!(err, OpenError::AlreadyOpen { .. }), "{err}");
    single.close().await.unwrap();
    let shared = Arc::new(SharedRedbStorage::open(&path).await.unwrap());
    assert_eq!(shared.get(&key("k")).await.unwrap(), None);
    let clone = Arc::unwrap_or_clone(shared);
    let extra = clone.clone();
    let still_used = extra.close().await.unwrap_err();
    assert!(still_used.to_string().contains("held.redb"), "{still_used}");
    clone.close().await.unwrap();
    // Closed: the single-process driver can have it again at once.
    RedbStorage::open(&path)
        .await
        .unwrap()
        .close()
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_files_and_options_are_refused() {
    let dir = tempfile::tempdir().unwrap();
    let text = dir.path().join("text.redb");
    std::fs::write(&text, b"not a database").unwrap();
    let err = SharedRedbStorage::open(&text).await.unwrap_err();
    assert!(matches!(err, OpenError::NotRedb { .. }), "{err}");
    assert_eq!(std::fs::read(&text).unwrap(), b"not a database");
    let err = SharedRedbStorage::builder()
        .sweep_limit(0)
        .open(dir.path().join("x.redb"))
        .await
        .unwrap_err();
    assert!(matches!(err, OpenError::InvalidOption { .. }), "{err}");
    let err = SharedRedbStorage::open(dir.path()).await.unwrap_err();
    assert!(matches!(err, OpenError::InvalidPath { .. }), "{err}");
}

#[test]
fn the_unreliable_file_system_error_names_the_file_and_the_way_out() {
    let err = OpenError::UnreliableLocks {
        path: "/mnt/nfs/leases.redb".into(),
        file_system: "NFS",
    };
    let message = err.to_string();
    assert!(message.contains("/mnt/nfs/leases.redb"), "{message}");
    assert!(message.contains("NFS"), "{message}");
    assert!(message.contains("allow_unreliable_locks"), "{message}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_opens_all_succeed() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("c.redb");
    for round in 0..3 {
        let opens: Vec<_> = (0..4)
            .map(|_| {
                let path = path.clone();
                tokio::spawn(async move { SharedRedbStorage::open(&path).await })
            })
            .collect();
        for open in opens {
            let storage = open
                .await
                .unwrap()
                .unwrap_or_else(|err| panic!("round {round}: {err:?}"));
            assert_eq!(storage.get(&key("k")).await.unwrap(), None);
        }
    }
}
