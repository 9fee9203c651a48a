//! The options both modes' builders share (group commit size, page cache,
//! parent directories), their checks, and the steps of opening a file that
//! both modes take on a blocking thread.

use std::path::{Path, PathBuf};

use redb::{ConcurrencyMode, Database};

use crate::{
    OpenError,
    identity::FileIdentity,
    open_checks::{check_magic, check_path, create_checked, ensure_parent, probe},
};

/// The options of [`RedbStorageBuilder`](crate::RedbStorageBuilder) and
/// [`SharedRedbStorageBuilder`](crate::SharedRedbStorageBuilder) alike.
#[derive(Debug, Clone)]
pub(crate) struct FileOptions {
    pub(crate) max_batch: usize,
    pub(crate) cache_size: usize,
    pub(crate) create_parent_dirs: bool,
}

impl FileOptions {
    /// Batches of up to 256 writes, a 16 MiB cache, parent directories
    /// created.
    pub(crate) const DEFAULT: FileOptions = FileOptions {
        max_batch: 256,
        cache_size: 16 * 1024 * 1024,
        create_parent_dirs: true,
    };

    /// Checks the ranges.
    pub(crate) fn validate(&self) -> Result<(), OpenError> {
        if !(1..=65_536).contains(&self.max_batch) {
            return Err(invalid("max_batch", "must be between 1 and 65536"));
        }
        if self.cache_size < 64 * 1024 {
            return Err(invalid("cache_size", "must be at least 64 KiB"));
        }
        Ok(())
    }

    /// Checks the path and creates (or requires) its parent directory.
    /// Blocks.
    pub(crate) fn prepare(&self, path: &Path) -> Result<(), OpenError> {
        check_path(path)?;
        ensure_parent(path, self.create_parent_dirs)
    }

    /// Checks an existing file (redb's magic bytes, a probe open in `mode`),
    /// then opens or creates it with this crate's tables; with the identity
    /// of the file opened. Blocks.
    pub(crate) fn create(
        &self,
        path: &Path,
        check_integrity: bool,
        mode: ConcurrencyMode,
    ) -> Result<(Database, FileIdentity), OpenError> {
        check_magic(path)?;
        probe(path, mode)?;
        create_checked(path, self.cache_size, check_integrity, mode)
    }
}

/// An option out of its range.
pub(crate) fn invalid(option: &'static str, reason: &str) -> OpenError {
    OpenError::InvalidOption {
        option,
        reason: reason.to_owned(),
    }
}

/// Runs the blocking `open` of the file at `path` on a blocking thread.
pub(crate) async fn on_blocking_thread<T: Send + 'static>(
    path: &Path,
    open: impl FnOnce(PathBuf) -> Result<T, OpenError> + Send + 'static,
) -> Result<T, OpenError> {
    let owned = path.to_path_buf();
    tokio::task::spawn_blocking(move || open(owned))
        .await
        .map_err(|_| OpenError::Interrupted {
            path: path.to_path_buf(),
        })?
}

/// The setters of the [`FileOptions`] in a builder's `file` field.
macro_rules! file_option_setters {
    () => {
        /// Most concurrent writes of this process committed together in one
        /// transaction (1 to 65 536). 1 disables group commit: one
        /// transaction and one fsync per write.
        pub fn max_batch(&mut self, max: usize) -> &mut Self {
            self.file.max_batch = max;
            self
        }

        /// redb's page cache size in bytes (at least 64 KiB).
        pub fn cache_size(&mut self, bytes: usize) -> &mut Self {
            self.file.cache_size = bytes;
            self
        }

        /// Whether a missing parent directory is created (the default) or
        /// reported as [`OpenError::MissingParentDir`](crate::OpenError::MissingParentDir).
        pub fn create_parent_dirs(&mut self, create: bool) -> &mut Self {
            self.file.create_parent_dirs = create;
            self
        }
    };
}

pub(crate) use file_option_setters;
