//! The shared `elections-testsuite` against the redb driver's shared mode
//! (`SharedRedbStorage`), in real time, each case on a fresh file in its own
//! temporary directory. The mode supports watching, so the suite requires it.
//! Run with `--test-threads 16` to finish fast (the cases mostly sleep).

use std::sync::Arc;

use async_trait::async_trait;
use storage_redb::SharedRedbStorage;
use ttl_storage::{DynTtlStorage, Key, Result, Ttl, TtlStorage, Watch, WatchUnsupported};

/// A storage that owns its temporary directory (fields drop in order: the
/// lock file is closed before the directory is removed).
struct TempStorage {
    storage: SharedRedbStorage,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl TtlStorage for TempStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        self.storage.insert_if_not_exists(key, value, ttl).await
    }
    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        self.storage.compare_and_swap(key, old, new, ttl).await
    }
    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        self.storage.compare_and_delete(key, value).await
    }
    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.storage.get(key).await
    }
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        self.storage.watch(key)
    }
}

async fn make_storage() -> DynTtlStorage {
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("no temp dir: {err}"));
    let storage = SharedRedbStorage::open(dir.path().join("suite.redb"))
        .await
        .unwrap_or_else(|err| panic!("cannot open the storage: {err}"));
    Arc::new(TempStorage { storage, _dir: dir })
}

elections_testsuite::testsuite!(real_time, make_storage, watch = required);
