//! The shared `elections-testsuite` against both modes of the redb driver,
//! in real time, each case on a fresh file in its own temporary directory:
//! `exclusive` (`RedbStorage`) and `shared` (`SharedRedbStorage`, which
//! supports watching, so the suite requires it there).
//! Ignored by `cargo test` (about 3 min with its 2 threads, the cases mostly
//! sleep): run by `cargo xtask test-drivers --engine redb`, 16 threads.

use std::{future::Future, path::PathBuf, sync::Arc};

use async_trait::async_trait;
use ttl_storage::{
    Counted, CountedWrite, DynTtlStorage, Key, Result, Ttl, TtlStorage, Watch, WatchUnsupported,
};

/// A storage that owns its temporary directory (fields drop in order: the
/// file is closed before the directory is removed).
struct TempStorage<S> {
    storage: S,
    _dir: tempfile::TempDir,
}

#[async_trait]
impl<S: TtlStorage> TtlStorage for TempStorage<S> {
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
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        self.storage.write_counted(write).await
    }
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        self.storage.watch(key)
    }
}

/// Opens a fresh file with `open` in a new temporary directory.
async fn fresh<S, E, F>(open: impl FnOnce(PathBuf) -> F) -> DynTtlStorage
where
    S: TtlStorage + 'static,
    E: std::fmt::Display,
    F: Future<Output = std::result::Result<S, E>>,
{
    let dir = tempfile::tempdir().unwrap_or_else(|err| panic!("no temp dir: {err}"));
    let storage = open(dir.path().join("suite.redb"))
        .await
        .unwrap_or_else(|err| panic!("cannot open the storage: {err}"));
    Arc::new(TempStorage { storage, _dir: dir })
}

mod exclusive {
    use storage_redb::RedbStorage;
    use ttl_storage::DynTtlStorage;

    async fn make_storage() -> DynTtlStorage {
        super::fresh(|path| async move { RedbStorage::open(path).await }).await
    }

    elections_testsuite::testsuite!(
        real_time,
        make_storage,
        ignore = "real time, about 3 min: run `cargo xtask test-drivers --engine redb`"
    );
}

mod shared {
    use storage_redb::SharedRedbStorage;
    use ttl_storage::DynTtlStorage;

    async fn make_storage() -> DynTtlStorage {
        super::fresh(|path| async move { SharedRedbStorage::open(path).await }).await
    }

    elections_testsuite::testsuite!(
        real_time,
        make_storage,
        watch = required,
        ignore = "real time, about 3 min: run `cargo xtask test-drivers --engine redb`"
    );
}
