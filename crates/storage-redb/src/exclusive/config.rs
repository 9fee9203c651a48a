//! Options and the opening of a storage file held by one process.

use std::{
    path::{Path, PathBuf},
    time::Duration,
};

use super::state::Shared;
use crate::{
    OpenError, RedbStorage,
    file_options::{FileOptions, file_option_setters, invalid, on_blocking_thread},
    handle::OpenFile,
};

/// Options of a [`RedbStorage`]; [`RedbStorageBuilder::open`] opens the file.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::time::Duration;
/// use storage_redb::RedbStorage;
///
/// let dir = tempfile::tempdir()?;
/// let storage = RedbStorage::builder()
///     .sweep_interval(Duration::from_secs(1))
///     .sweep_limit(500)
///     .open(dir.path().join("leases.redb"))
///     .await?;
/// # storage.close().await?;
/// # Ok(()) }
/// ```
#[derive(Debug, Clone)]
pub struct RedbStorageBuilder {
    sweep_interval: Option<Duration>,
    sweep_limit: usize,
    file: FileOptions,
    check_integrity: bool,
}

impl Default for RedbStorageBuilder {
    fn default() -> Self {
        RedbStorageBuilder::new()
    }
}

impl RedbStorageBuilder {
    /// Default time between two sweep passes.
    pub const DEFAULT_SWEEP_INTERVAL: Duration = Duration::from_secs(5);
    /// Default most expired records one sweep pass deletes.
    pub const DEFAULT_SWEEP_LIMIT: usize = 1000;
    /// Default most writes committed together in one transaction.
    pub const DEFAULT_MAX_BATCH: usize = FileOptions::DEFAULT.max_batch;
    /// Default redb page cache size: 16 MiB.
    pub const DEFAULT_CACHE_SIZE: usize = FileOptions::DEFAULT.cache_size;

    /// The defaults: sweep every 5 s up to 1000 records, batches of up to 256
    /// writes, a 16 MiB cache, parent directories created, integrity checked
    /// on open.
    pub fn new() -> Self {
        RedbStorageBuilder {
            sweep_interval: Some(Self::DEFAULT_SWEEP_INTERVAL),
            sweep_limit: Self::DEFAULT_SWEEP_LIMIT,
            file: FileOptions::DEFAULT,
            check_integrity: true,
        }
    }

    /// Time between two sweep passes (10 ms to 1 day).
    pub fn sweep_interval(&mut self, interval: Duration) -> &mut Self {
        self.sweep_interval = Some(interval);
        self
    }

    /// Runs no background sweep: expired records are then reclaimed only when
    /// a write touches their key or by [`RedbStorage::sweep_now`].
    pub fn without_sweep(&mut self) -> &mut Self {
        self.sweep_interval = None;
        self
    }

    /// Most expired records one sweep pass deletes (1 to 1 000 000). Bounds the
    /// length of the sweep's write transaction.
    pub fn sweep_limit(&mut self, limit: usize) -> &mut Self {
        self.sweep_limit = limit;
        self
    }

    file_option_setters!();

    /// Whether every page checksum is verified on open (the default). Without
    /// it redb verifies only after an unclean shutdown, and may panic (caught,
    /// reported as [`OpenError::Corrupted`]) on a file damaged outside redb.
    pub fn check_integrity_on_open(&mut self, check: bool) -> &mut Self {
        self.check_integrity = check;
        self
    }

    fn validate(&self) -> Result<(), OpenError> {
        if let Some(interval) = self.sweep_interval
            && (interval < Duration::from_millis(10) || interval > Duration::from_secs(86_400))
        {
            return Err(invalid("sweep_interval", "must be between 10 ms and 1 day"));
        }
        if !(1..=1_000_000).contains(&self.sweep_limit) {
            return Err(invalid("sweep_limit", "must be between 1 and 1000000"));
        }
        self.file.validate()
    }

    /// Opens the storage file at `path`, creating it (and, unless disabled,
    /// its parent directories) when it does not exist. An empty file is
    /// initialised; any other file must be a storage file written by this
    /// crate, else the open fails and the file is left untouched.
    ///
    /// Must be called within a tokio runtime: the file is opened on a blocking
    /// thread and the sweep runs as a task of that runtime.
    pub async fn open(&self, path: impl AsRef<Path>) -> Result<RedbStorage, OpenError> {
        self.validate()?;
        let path = path.as_ref();
        let options = self.clone();
        let shared = on_blocking_thread(path, move |path| options.open_blocking(path)).await?;
        let sweep = self.sweep_interval.map(|every| (every, self.sweep_limit));
        tracing::debug!(path = %path.display(), "opened storage file");
        Ok(RedbStorage::start(shared, sweep))
    }

    fn open_blocking(&self, path: PathBuf) -> Result<Shared, OpenError> {
        self.file.prepare(&path)?;
        let mode = redb::ConcurrencyMode::ExclusiveWriter;
        let (db, identity) = self.file.create(&path, self.check_integrity, mode)?;
        Ok(OpenFile::new(db, identity, path, self.file.max_batch))
    }
}

impl RedbStorage {
    /// Opens (or creates) the storage file at `path` with default options.
    /// See [`RedbStorageBuilder::open`]. Must be called within a tokio runtime.
    pub async fn open(path: impl AsRef<Path>) -> Result<RedbStorage, OpenError> {
        RedbStorageBuilder::new().open(path).await
    }

    /// Opens (or creates) the file `config` names, with default options, for
    /// this process alone (whatever [`RedbConfig::mode`](crate::RedbConfig::mode)
    /// says: the registry picks the type from it).
    pub async fn connect(config: crate::RedbConfig) -> Result<RedbStorage, OpenError> {
        RedbStorage::open(config.path()).await
    }

    /// A builder to set options before opening.
    pub fn builder() -> RedbStorageBuilder {
        RedbStorageBuilder::new()
    }
}
