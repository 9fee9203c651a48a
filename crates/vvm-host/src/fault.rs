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
use ttl_storage::{DynTtlStorage, Key, StorageError};

use crate::observed_storage::{Call, Gate, Observed, Observer, Outcome, Started};

/// The environment variable that enables the hook.
pub(crate) const FAULT_FILE_VAR: &str = "VVM_HOST_FAULT_FILE";

/// The faults the file asks for, around each storage call.
pub(crate) struct FaultyStorage {
    file: PathBuf,
    last_write: PathBuf,
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
        Observed::wrap(
            inner,
            FaultyStorage {
                file,
                last_write: PathBuf::from(last_write),
            },
        )
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
impl Observer for FaultyStorage {
    /// `hang` never returns, `error` fails the call, `lost` answers a
    /// compare-and-swap "another value".
    async fn before(&self, _call: Call) -> ttl_storage::Result<Gate> {
        let text = tokio::fs::read_to_string(&self.file)
            .await
            .unwrap_or_default();
        match text.trim() {
            "hang" => std::future::pending().await,
            "error" => Err(StorageError::transient("injected storage fault")),
            "lost" => Ok(Gate::SwapLost),
            _ => Ok(Gate::Through),
        }
    }

    /// Keeps the start of each successful write.
    async fn after(&self, _key: &Key, started: Started, outcome: Outcome<'_>) {
        if let Outcome::Wrote = outcome {
            self.wrote(started.wall).await;
        }
    }
}
