//! A testing hook: storage faults injected from outside the process.
//!
//! When `VVM_HOST_FAULT_FILE` names a file, every storage call first reads
//! it. If it holds `hang`, the call never returns (a frozen file system, a
//! black-holed network store); `error`, the call fails with a transient
//! error (a store that answers but fails); `lost`, compare-and-swap answers
//! "the record holds another value" (another node took the lease). Absent
//! or empty: the call goes through. The start time (Unix nanoseconds) of
//! the last successful write is kept in `<file>.last-write`, so a test knows
//! when the lease it granted runs out.
//!
//! The variable is for tests of the real binary; it costs one file read per
//! storage call. It works in debug builds only (`cargo test` builds the
//! binary it spawns that way): a release build (`cargo install`, `cargo
//! build --release`) ignores it with a warning, so a production binary has
//! no fault injection to switch on.

use std::{
    path::{Path, PathBuf},
    time::SystemTime,
};

use async_trait::async_trait;
use ttl_storage::{DynTtlStorage, Key, StorageError, Ttl, TtlStorage};

/// The environment variable that enables the hook.
pub(crate) const FAULT_FILE_VAR: &str = "VVM_HOST_FAULT_FILE";

/// `inner`, with the faults the file asks for.
pub(crate) struct FaultyStorage {
    inner: DynTtlStorage,
    file: PathBuf,
    last_write: PathBuf,
}

#[derive(Debug, PartialEq, Eq)]
enum Fault {
    None,
    Hang,
    Error,
    Lost,
}

impl FaultyStorage {
    /// Wraps `inner` if the variable is set.
    pub(crate) fn wrap_if_requested(inner: DynTtlStorage) -> DynTtlStorage {
        let file = match std::env::var_os(FAULT_FILE_VAR) {
            Some(file) if !file.is_empty() => file,
            _ => return inner,
        };
        if !cfg!(debug_assertions) {
            tracing::warn!(file = ?file, "{FAULT_FILE_VAR} is ignored: storage fault injection exists in debug builds only");
            return inner;
        }
        tracing::warn!(file = ?file, "storage fault injection enabled ({FAULT_FILE_VAR}); for tests only");
        let file = PathBuf::from(file);
        let mut last_write = file.clone().into_os_string();
        last_write.push(".last-write");
        std::sync::Arc::new(FaultyStorage {
            inner,
            file,
            last_write: PathBuf::from(last_write),
        })
    }

    async fn fault(&self) -> Result<Fault, StorageError> {
        let text = tokio::fs::read_to_string(&self.file)
            .await
            .unwrap_or_default();
        let fault = match text.trim() {
            "hang" => Fault::Hang,
            "error" => Fault::Error,
            "lost" => Fault::Lost,
            _ => Fault::None,
        };
        match fault {
            Fault::Hang => std::future::pending().await,
            Fault::Error => Err(StorageError::transient("injected storage fault")),
            other => Ok(other),
        }
    }

    async fn wrote(&self, started: SystemTime) {
        let nanos = started
            .duration_since(SystemTime::UNIX_EPOCH)
            .map(|d| d.as_nanos())
            .unwrap_or_default();
        write_atomically(&self.last_write, nanos.to_string()).await;
    }
}

async fn write_atomically(path: &Path, text: String) {
    let mut tmp = path.to_path_buf().into_os_string();
    tmp.push(".tmp");
    if tokio::fs::write(&tmp, text).await.is_ok() {
        let _ = tokio::fs::rename(&tmp, path).await;
    }
}

#[async_trait]
impl TtlStorage for FaultyStorage {
    async fn insert_if_not_exists(
        &self,
        key: &Key,
        value: &[u8],
        ttl: Ttl,
    ) -> ttl_storage::Result<bool> {
        self.fault().await?;
        let started = SystemTime::now();
        let inserted = self.inner.insert_if_not_exists(key, value, ttl).await?;
        if inserted {
            self.wrote(started).await;
        }
        Ok(inserted)
    }

    async fn compare_and_swap(
        &self,
        key: &Key,
        old: &[u8],
        new: &[u8],
        ttl: Ttl,
    ) -> ttl_storage::Result<bool> {
        if self.fault().await? == Fault::Lost {
            return Ok(false);
        }
        let started = SystemTime::now();
        let swapped = self.inner.compare_and_swap(key, old, new, ttl).await?;
        if swapped {
            self.wrote(started).await;
        }
        Ok(swapped)
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> ttl_storage::Result<bool> {
        self.fault().await?;
        self.inner.compare_and_delete(key, value).await
    }

    async fn get(&self, key: &Key) -> ttl_storage::Result<Option<Vec<u8>>> {
        self.fault().await?;
        self.inner.get(key).await
    }

    fn watch(&self, key: &Key) -> Result<ttl_storage::Watch, ttl_storage::WatchUnsupported> {
        self.inner.watch(key)
    }
}
