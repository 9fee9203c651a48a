//! The read-only open through the descriptor (`DRIVER.open_existing`, what
//! `vvm-host status` and `handover` use): it creates no file and no
//! directory and writes nothing; a store that is not there is a
//! `ttl_storage::NoStore` error. In both modes.

#![allow(clippy::unwrap_used, clippy::expect_used)] // test helpers panic on failure

use std::path::Path;

use storage_redb::{RedbStorage, SharedRedbStorage};
use ttl_storage::{Key, NoStore, Ttl, TtlStorage};

/// The entries of `dir`, sorted.
fn entries(dir: &Path) -> Vec<String> {
    let mut names: Vec<String> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .collect();
    names.sort();
    names
}

fn url(path: &Path, mode: &str) -> String {
    format!("redb://{}{mode}", path.display())
}

#[tokio::test]
async fn a_missing_store_is_no_store_and_nothing_is_created() {
    let dir = tempfile::tempdir().unwrap();
    let empty = dir.path().join("empty.redb");
    std::fs::File::create(&empty).unwrap();
    for mode in ["", "?mode=exclusive"] {
        for path in [
            dir.path().join("no/such/dir/s.redb"),
            dir.path().join("s.redb"),
            empty.clone(),
        ] {
            let parsed = (storage_redb::DRIVER.parse)(&url(&path, mode)).unwrap();
            let err = (storage_redb::DRIVER.open_existing)(&parsed)
                .await
                .err()
                .unwrap_or_else(|| panic!("{} {mode}: opened", path.display()));
            assert!(
                NoStore::find(&*err).is_some(),
                "{} {mode}: not NoStore: {err}",
                path.display()
            );
        }
    }
    assert_eq!(entries(dir.path()), ["empty.redb"], "something was created");
    assert_eq!(std::fs::metadata(&empty).unwrap().len(), 0, "written");
}

#[tokio::test]
async fn an_existing_store_opens_and_reads() {
    let dir = tempfile::tempdir().unwrap();
    let key = Key::new("k").unwrap();
    let ttl = Ttl::from_secs(600).unwrap();

    let shared = dir.path().join("shared.redb");
    let store = SharedRedbStorage::open(&shared).await.unwrap();
    assert!(store.insert_if_not_exists(&key, b"v", ttl).await.unwrap());
    store.close().await.unwrap();

    let exclusive = dir.path().join("exclusive.redb");
    let store = RedbStorage::open(&exclusive).await.unwrap();
    assert!(store.insert_if_not_exists(&key, b"v", ttl).await.unwrap());
    store.close().await.unwrap();

    for (path, mode) in [(shared, ""), (exclusive, "?mode=exclusive")] {
        let parsed = (storage_redb::DRIVER.parse)(&url(&path, mode)).unwrap();
        let store = (storage_redb::DRIVER.open_existing)(&parsed).await.unwrap();
        assert_eq!(
            store.get(&key).await.unwrap(),
            Some(b"v".to_vec()),
            "{mode}"
        );
    }
}
