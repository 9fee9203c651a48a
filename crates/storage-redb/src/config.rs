//! Options and the opening of a storage file.

use std::{
    fs,
    io::{self, Read},
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    time::Duration,
};

use crate::{
    OpenError, RedbStorage,
    schema::{self, SchemaError},
    storage::Shared,
};

/// The first bytes of every redb file (redb's file format, `docs/design.md`).
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

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
    max_batch: usize,
    cache_size: usize,
    create_parent_dirs: bool,
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
    pub const DEFAULT_MAX_BATCH: usize = 256;
    /// Default redb page cache size: 16 MiB.
    pub const DEFAULT_CACHE_SIZE: usize = 16 * 1024 * 1024;

    /// The defaults: sweep every 5 s up to 1000 records, batches of up to 256
    /// writes, a 16 MiB cache, parent directories created, integrity checked
    /// on open.
    pub fn new() -> Self {
        RedbStorageBuilder {
            sweep_interval: Some(Self::DEFAULT_SWEEP_INTERVAL),
            sweep_limit: Self::DEFAULT_SWEEP_LIMIT,
            max_batch: Self::DEFAULT_MAX_BATCH,
            cache_size: Self::DEFAULT_CACHE_SIZE,
            create_parent_dirs: true,
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

    /// Most concurrent writes committed together (1 to 65 536). 1 disables
    /// group commit: one transaction and one fsync per write.
    pub fn max_batch(&mut self, max: usize) -> &mut Self {
        self.max_batch = max;
        self
    }

    /// redb's page cache size in bytes (at least 64 KiB).
    pub fn cache_size(&mut self, bytes: usize) -> &mut Self {
        self.cache_size = bytes;
        self
    }

    /// Whether a missing parent directory is created (the default) or
    /// reported as [`OpenError::MissingParentDir`].
    pub fn create_parent_dirs(&mut self, create: bool) -> &mut Self {
        self.create_parent_dirs = create;
        self
    }

    /// Whether every page checksum is verified on open (the default). Without
    /// it redb verifies only after an unclean shutdown, and may panic (caught,
    /// reported as [`OpenError::Corrupted`]) on a file damaged outside redb.
    pub fn check_integrity_on_open(&mut self, check: bool) -> &mut Self {
        self.check_integrity = check;
        self
    }

    fn validate(&self) -> Result<(), OpenError> {
        let invalid = |option, reason: &str| {
            Err(OpenError::InvalidOption {
                option,
                reason: reason.to_owned(),
            })
        };
        if let Some(interval) = self.sweep_interval
            && (interval < Duration::from_millis(10) || interval > Duration::from_secs(86_400))
        {
            return invalid("sweep_interval", "must be between 10 ms and 1 day");
        }
        if !(1..=1_000_000).contains(&self.sweep_limit) {
            return invalid("sweep_limit", "must be between 1 and 1000000");
        }
        if !(1..=65_536).contains(&self.max_batch) {
            return invalid("max_batch", "must be between 1 and 65536");
        }
        if self.cache_size < 64 * 1024 {
            return invalid("cache_size", "must be at least 64 KiB");
        }
        Ok(())
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
        let path = path.as_ref().to_path_buf();
        let options = self.clone();
        let opening = {
            let path = path.clone();
            tokio::task::spawn_blocking(move || options.open_blocking(path))
        };
        let shared = opening
            .await
            .map_err(|_| OpenError::Interrupted { path: path.clone() })??;
        let sweep = self.sweep_interval.map(|every| (every, self.sweep_limit));
        tracing::debug!(path = %path.display(), "opened storage file");
        Ok(RedbStorage::start(shared, sweep))
    }

    fn open_blocking(&self, path: PathBuf) -> Result<Shared, OpenError> {
        check_path(&path)?;
        ensure_parent(&path, self.create_parent_dirs)?;
        check_magic(&path)?;
        probe(&path, redb::ConcurrencyMode::ExclusiveWriter)?;
        let db = create_checked(
            &path,
            self.cache_size,
            self.check_integrity,
            redb::ConcurrencyMode::ExclusiveWriter,
        )?;
        Ok(Shared::new(db, path, self.max_batch))
    }
}

/// Refuses an empty path and a directory.
pub(crate) fn check_path(path: &Path) -> Result<(), OpenError> {
    if path.as_os_str().is_empty() {
        return Err(OpenError::InvalidPath {
            path: path.to_path_buf(),
            reason: "the path is empty",
        });
    }
    if path.is_dir() {
        return Err(OpenError::InvalidPath {
            path: path.to_path_buf(),
            reason: "it is a directory",
        });
    }
    Ok(())
}

/// Opens (or creates) the redb file at `path` read-write and creates or
/// checks this crate's tables in it. Call after [`check_magic`] and [`probe`].
pub(crate) fn create_checked(
    path: &Path,
    cache_size: usize,
    check_integrity: bool,
    mode: redb::ConcurrencyMode,
) -> Result<redb::Database, OpenError> {
    let mut builder = redb::Builder::new();
    builder
        .set_cache_size(cache_size)
        .set_check_integrity_on_open(check_integrity)
        .set_concurrency_mode(mode);
    // redb may panic on a file damaged outside redb; report that, never crash.
    let db = catch_unwind(AssertUnwindSafe(|| builder.create(path)))
        .map_err(|panic| panicked(path, &panic))?
        .map_err(|err| OpenError::from_redb(path.to_path_buf(), err.into()))?;
    let checked = catch_unwind(AssertUnwindSafe(|| schema::init_or_check(&db)))
        .map_err(|panic| panicked(path, &panic))?;
    schema_result(path, checked)?;
    Ok(db)
}

/// Creates the missing parent directory of `path` when `create` is set,
/// else reports it.
pub(crate) fn ensure_parent(path: &Path, create: bool) -> Result<(), OpenError> {
    let Some(parent) = path.parent().filter(|p| !p.as_os_str().is_empty()) else {
        return Ok(());
    };
    if parent.is_dir() {
        return Ok(());
    }
    if !create {
        return Err(OpenError::MissingParentDir {
            path: path.to_path_buf(),
        });
    }
    fs::create_dir_all(parent).map_err(|source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    })
}

/// Maps the outcome of a schema check to an open error.
pub(crate) fn schema_result(
    path: &Path,
    checked: Result<(), SchemaError>,
) -> Result<(), OpenError> {
    let path = path.to_path_buf();
    match checked {
        Ok(()) => Ok(()),
        Err(SchemaError::Foreign(tables)) => Err(OpenError::ForeignDatabase { path, tables }),
        Err(SchemaError::Version(found)) => Err(OpenError::UnsupportedFormat {
            path,
            found,
            supported: schema::FORMAT_VERSION,
        }),
        Err(SchemaError::Redb(err)) => Err(OpenError::from_redb(path, err)),
    }
}

/// Checks an existing redb file's tables through a read-only open, so that a
/// redb database of another program is refused before anything writes to it
/// (the read-write open's integrity check commits). A file the read-only open
/// cannot read (one that needs recovery after a crash, or a corrupt one) is
/// left to the read-write open, which repairs or reports it; a file held by
/// another process is reported at once. `mode` is the mode the file will be
/// opened in: a read-only open in another mode than the file's other users
/// is refused as "already open".
pub(crate) fn probe(path: &Path, mode: redb::ConcurrencyMode) -> Result<(), OpenError> {
    if fs::metadata(path)
        .map(|meta| meta.len() == 0)
        .unwrap_or(true)
    {
        return Ok(());
    }
    let opened = catch_unwind(AssertUnwindSafe(|| {
        let db = redb::Builder::new()
            .set_concurrency_mode(mode)
            .open_read_only(path)?;
        Ok::<_, redb::Error>(schema::check_read_only(&db))
    }));
    match opened {
        Ok(Err(redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch)) => {
            Err(OpenError::AlreadyOpen {
                path: path.to_path_buf(),
            })
        }
        Ok(Ok(checked @ Err(SchemaError::Foreign(_) | SchemaError::Version(_)))) => {
            schema_result(path, checked)
        }
        // Readable and ours, or unreadable: the read-write open decides.
        _ => Ok(()),
    }
}

/// Rejects an existing, non-empty file that does not start with redb's magic,
/// before redb sees it.
pub(crate) fn check_magic(path: &Path) -> Result<(), OpenError> {
    let io_error = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    let mut file = match fs::File::open(path) {
        Ok(file) => file,
        Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(err) => return Err(io_error(err)),
    };
    let mut head = Vec::with_capacity(REDB_MAGIC.len());
    (&mut file)
        .take(REDB_MAGIC.len() as u64)
        .read_to_end(&mut head)
        .map_err(io_error)?;
    if head.is_empty() || head == REDB_MAGIC {
        Ok(())
    } else {
        Err(OpenError::NotRedb {
            path: path.to_path_buf(),
        })
    }
}

/// The error for a panic of redb while reading `path`.
pub(crate) fn panicked(path: &Path, panic: &Box<dyn std::any::Any + Send>) -> OpenError {
    let message = panic
        .downcast_ref::<&str>()
        .map(|s| (*s).to_owned())
        .or_else(|| panic.downcast_ref::<String>().cloned())
        .unwrap_or_else(|| "unknown panic".to_owned());
    OpenError::Corrupted {
        path: path.to_path_buf(),
        message: format!("redb panicked reading the file: {message}"),
        source: None,
    }
}
