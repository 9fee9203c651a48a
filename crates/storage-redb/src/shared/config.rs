//! Options and the opening of a storage file shared by several processes.

use std::path::Path;

use redb::ConcurrencyMode;

use super::storage::Inner;
use crate::{
    OpenError, SharedRedbStorage,
    file_options::{FileOptions, file_option_setters, invalid, on_blocking_thread},
    fs_check,
    handle::OpenFile,
    identity::FileIdentity,
    watch::{ChangeFeed, EventsFile},
};

/// Options of a [`SharedRedbStorage`]; [`SharedRedbStorageBuilder::open`]
/// opens the file.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use storage_redb::SharedRedbStorage;
///
/// let dir = tempfile::tempdir()?;
/// let storage = SharedRedbStorage::builder()
///     .sweep_limit(100)
///     .open(dir.path().join("leases.redb"))
///     .await?;
/// # drop(storage);
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct SharedRedbStorageBuilder {
    sweep_limit: usize,
    file: FileOptions,
    allow_unreliable_locks: bool,
    watch: bool,
}

impl Default for SharedRedbStorageBuilder {
    fn default() -> Self {
        SharedRedbStorageBuilder::new()
    }
}

impl SharedRedbStorageBuilder {
    /// Default most expired records one write batch also deletes.
    pub const DEFAULT_SWEEP_LIMIT: usize = 64;
    /// Default most writes of this process committed together.
    pub const DEFAULT_MAX_BATCH: usize = FileOptions::DEFAULT.max_batch;
    /// Default redb page cache: 16 MiB.
    pub const DEFAULT_CACHE_SIZE: usize = FileOptions::DEFAULT.cache_size;

    /// The defaults: each write batch sweeps up to 64 expired records,
    /// batches of up to 256 writes, parent directories created, file systems
    /// with unreliable locks refused, watching enabled.
    pub fn new() -> Self {
        SharedRedbStorageBuilder {
            sweep_limit: Self::DEFAULT_SWEEP_LIMIT,
            file: FileOptions::DEFAULT,
            allow_unreliable_locks: false,
            watch: true,
        }
    }

    /// Most expired records each write batch also deletes, in its own
    /// transaction (1 to 100 000). There is no background sweep in the
    /// shared mode: every process's writes reclaim expired records.
    pub fn sweep_limit(&mut self, limit: usize) -> &mut Self {
        self.sweep_limit = limit;
        self
    }

    // Processes drop their page cache whenever another process has
    // committed.
    file_option_setters!();

    /// Opens the file even on a file system where OS file locks between
    /// processes are not known to be reliable (NFS, SMB/CIFS, 9P, FUSE, ...),
    /// which is otherwise refused with [`OpenError::UnreliableLocks`]. Only
    /// for file systems whose locking you have checked, and only with every
    /// process on the same host (expiry uses the host's clock).
    pub fn allow_unreliable_locks(&mut self, allow: bool) -> &mut Self {
        self.allow_unreliable_locks = allow;
        self
    }

    /// Whether [`TtlStorage::watch`](ttl_storage::TtlStorage::watch) is
    /// supported (the default, on Linux: one inotify descriptor and one task
    /// per handle, watching `<path>.events`). Off, watching reports
    /// unsupported and waiters poll.
    pub fn watch(&mut self, watch: bool) -> &mut Self {
        self.watch = watch;
        self
    }

    fn validate(&self) -> Result<(), OpenError> {
        if !(1..=100_000).contains(&self.sweep_limit) {
            return Err(invalid("sweep_limit", "must be between 1 and 100000"));
        }
        self.file.validate()
    }

    /// Opens the storage file at `path` for sharing with other processes,
    /// creating it (and, unless disabled, its parent directories) and its
    /// events file `<path>.events` when they do not exist. The file is
    /// checked as [`RedbStorageBuilder::open`](crate::RedbStorageBuilder::open)
    /// does (redb magic, this crate's tables, every page checksum: redb runs
    /// the check under its writer lock). A file another process holds with
    /// [`RedbStorage`](crate::RedbStorage) (exclusively) is reported as
    /// [`OpenError::AlreadyOpen`].
    ///
    /// Must be called within a tokio runtime (with I/O enabled, for watching).
    pub async fn open(&self, path: impl AsRef<Path>) -> Result<SharedRedbStorage, OpenError> {
        self.validate()?;
        let path = path.as_ref().to_path_buf();
        let options = self.clone();
        let (db, identity, events) =
            on_blocking_thread(&path, move |path| options.open_blocking(&path)).await?;
        let feed = if self.watch {
            match ChangeFeed::start(events.path()) {
                Ok(feed) => Some(feed),
                Err(err) => {
                    tracing::warn!(path = %path.display(), error = %err, "cannot watch the events file; waiters will poll");
                    None
                }
            }
        } else {
            None
        };
        tracing::debug!(path = %path.display(), "opened shared storage file");
        Ok(SharedRedbStorage::new(Inner {
            file: OpenFile::new(db, identity, path, self.file.max_batch),
            events,
            sweep_limit: self.sweep_limit,
            feed,
        }))
    }

    fn open_blocking(
        &self,
        path: &Path,
    ) -> Result<(redb::Database, FileIdentity, EventsFile), OpenError> {
        self.file.prepare(path)?;
        self.check_file_system(path)?;
        let io_error = |source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        };
        let events = EventsFile::open(EventsFile::path_for(path)).map_err(io_error)?;
        // Processes that open at once must not see each other's half-created
        // file: the checks and the creation run under a lock of the events file.
        let opening = events.lock_for_opening().map_err(io_error)?;
        let (db, identity) = self.file.create(path, true, ConcurrencyMode::MultiWriter)?;
        drop(opening);
        Ok((db, identity, events))
    }

    fn check_file_system(&self, path: &Path) -> Result<(), OpenError> {
        let dir = path
            .parent()
            .filter(|p| !p.as_os_str().is_empty())
            .unwrap_or(Path::new("."));
        let unreliable = fs_check::check(dir).map_err(|source| OpenError::Io {
            path: path.to_path_buf(),
            source,
        })?;
        refuse_unreliable(path, unreliable, self.allow_unreliable_locks)
    }
}

/// Refuses a file on a file system with unreliable locks, unless allowed
/// (then logs a warning).
fn refuse_unreliable(
    path: &Path,
    unreliable: Option<fs_check::Unreliable>,
    allow: bool,
) -> Result<(), OpenError> {
    match unreliable {
        None => Ok(()),
        Some(fs) if allow => {
            tracing::warn!(
                path = %path.display(),
                file_system = fs.name,
                "shared storage on a file system with unreliable locks, as allowed"
            );
            Ok(())
        }
        Some(fs) => Err(OpenError::UnreliableLocks {
            path: path.to_path_buf(),
            file_system: fs.name,
        }),
    }
}

impl SharedRedbStorage {
    /// Opens (or creates) the storage file at `path` for sharing, with
    /// default options. See [`SharedRedbStorageBuilder::open`]. Must be
    /// called within a tokio runtime.
    pub async fn open(path: impl AsRef<Path>) -> Result<SharedRedbStorage, crate::OpenError> {
        SharedRedbStorageBuilder::new().open(path).await
    }

    /// Opens (or creates) the file `config` names for sharing, with default
    /// options (whatever [`RedbConfig::mode`](crate::RedbConfig::mode) says:
    /// the registry picks the type from it).
    pub async fn connect(config: crate::RedbConfig) -> Result<SharedRedbStorage, crate::OpenError> {
        SharedRedbStorage::open(config.path()).await
    }

    /// A builder to set options before opening.
    pub fn builder() -> SharedRedbStorageBuilder {
        SharedRedbStorageBuilder::new()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unreliable_file_systems_are_refused_unless_allowed() {
        let path = Path::new("/mnt/share/leases.redb");
        let nfs = fs_check::classify(0x6969);
        assert!(nfs.is_some());
        let err = refuse_unreliable(path, nfs, false).unwrap_err();
        assert!(
            matches!(
                err,
                OpenError::UnreliableLocks {
                    file_system: "NFS",
                    ..
                }
            ),
            "{err}"
        );
        assert!(err.to_string().contains("/mnt/share/leases.redb"));
        refuse_unreliable(path, nfs, true).unwrap();
        refuse_unreliable(path, None, false).unwrap();
    }
}
