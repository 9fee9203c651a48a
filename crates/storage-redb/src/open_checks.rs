//! The checks both modes run when they open a storage file: the path, the
//! parent directory, redb's magic bytes, a probe open, and the schema.

use std::{
    fs,
    io::{self, Read},
    panic::{AssertUnwindSafe, catch_unwind},
    path::Path,
};

use crate::{
    OpenError,
    identity::FileIdentity,
    schema::{self, SchemaError},
};

/// The first bytes of every redb file (redb's file format, `docs/design.md`).
const REDB_MAGIC: [u8; 9] = [b'r', b'e', b'd', b'b', 0x1A, 0x0A, 0xA9, 0x0D, 0x0A];

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
/// Returns the database and the identity of the file it has open, which
/// the path must still name now.
pub(crate) fn create_checked(
    path: &Path,
    cache_size: usize,
    check_integrity: bool,
    mode: redb::ConcurrencyMode,
) -> Result<(redb::Database, FileIdentity), OpenError> {
    let io_error = |source| OpenError::Io {
        path: path.to_path_buf(),
        source,
    };
    // Opened here, as redb would, so the identity is that of the very file
    // redb uses.
    let file = fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path)
        .map_err(io_error)?;
    let identity = FileIdentity::of(&file, path).map_err(io_error)?;
    let backend = redb::backends::FileBackend::new(file)
        .map_err(|err| OpenError::from_redb(path.to_path_buf(), err.into()))?;
    let mut builder = redb::Builder::new();
    builder
        .set_cache_size(cache_size)
        .set_check_integrity_on_open(check_integrity)
        .set_concurrency_mode(mode);
    // redb may panic on a file damaged outside redb; report that, never crash.
    let db = catch_unwind(AssertUnwindSafe(|| builder.create_with_backend(backend)))
        .map_err(|panic| panicked(path, &panic))?
        .map_err(|err| OpenError::from_redb(path.to_path_buf(), err.into()))?;
    let checked = catch_unwind(AssertUnwindSafe(|| schema::init_or_check(&db)))
        .map_err(|panic| panicked(path, &panic))?;
    schema_result(path, checked)?;
    if !identity.holds().map_err(io_error)? {
        return Err(OpenError::Moved {
            path: path.to_path_buf(),
        });
    }
    Ok((db, identity))
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
