//! Errors of opening and closing a storage file, and the mapping of redb's
//! errors to [`StorageError`] kinds.

use std::{io, path::PathBuf, sync::Arc};

use ttl_storage::{ErrorKind, StorageError};

/// Why [`crate::RedbStorage::open`] (or [`crate::RedbStorageBuilder::open`]) failed.
///
/// Every variant names the file. Nothing is ever deleted or re-initialised
/// on error: a file that is not a valid storage file is left as it was.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum OpenError {
    /// A builder option is out of range.
    #[error("invalid option `{option}`: {reason}")]
    InvalidOption {
        /// The option's name.
        option: &'static str,
        /// What is wrong with it.
        reason: String,
    },
    /// The path is empty or names a directory.
    #[error("{path:?} is not a usable file path: {reason}")]
    InvalidPath {
        /// The rejected path.
        path: PathBuf,
        /// What is wrong with it.
        reason: &'static str,
    },
    /// The parent directory does not exist and creating it was disabled
    /// ([`crate::RedbStorageBuilder::create_parent_dirs`]).
    #[error("parent directory of {path:?} does not exist")]
    MissingParentDir {
        /// The storage file.
        path: PathBuf,
    },
    /// A read-only open found no storage file (or an empty one) at the
    /// path: nothing was created.
    #[error("no storage file at {path:?} (nothing was created)")]
    Missing {
        /// The storage file.
        path: PathBuf,
    },
    /// Another process (or another handle in this process) has the file open.
    /// redb allows one writer per file; stop the other owner first.
    #[error("storage file {path:?} is already open in another process or handle")]
    AlreadyOpen {
        /// The storage file.
        path: PathBuf,
    },
    /// The storage file is on a file system where OS file locks between
    /// processes are not reliable (NFS, SMB/CIFS, 9P, FUSE, ...): the shared
    /// mode ([`crate::SharedRedbStorage`]) could let two processes write at
    /// once. Put the file on a local disk, or, if you know the locks hold
    /// there, allow it with
    /// [`SharedRedbStorageBuilder::allow_unreliable_locks`](crate::SharedRedbStorageBuilder::allow_unreliable_locks).
    #[error(
        "storage file {path:?} is on a {file_system} file system, where file locks between processes are not reliable: put it on a local disk (e.g. --storage redb:///var/lib/app/leases.redb), or let one process hold it (?mode=exclusive), or, in code that knows the locks hold there, SharedRedbStorageBuilder::allow_unreliable_locks"
    )]
    UnreliableLocks {
        /// The storage file.
        path: PathBuf,
        /// The file system's name.
        file_system: &'static str,
    },
    /// The file exists but is not a redb database.
    #[error("{path:?} is not a redb database file (it was left untouched)")]
    NotRedb {
        /// The file.
        path: PathBuf,
    },
    /// The file is a redb database that fails its integrity check or cannot
    /// be read. It was left untouched; restore it from a backup or move it away.
    #[error("storage file {path:?} is corrupt (it was left untouched): {message}")]
    Corrupted {
        /// The storage file.
        path: PathBuf,
        /// What redb reported.
        message: String,
        /// redb's error, when there is one (a panic inside redb has none).
        #[source]
        source: Option<Box<redb::Error>>,
    },
    /// The file is a redb database of some other program (it holds other tables).
    #[error("{path:?} is a redb database of another program (tables: {tables:?})")]
    ForeignDatabase {
        /// The file.
        path: PathBuf,
        /// The tables found in it.
        tables: Vec<String>,
    },
    /// The file was written in a format this version does not read.
    #[error(
        "storage file {path:?} has format version {found}; this build reads version {supported}"
    )]
    UnsupportedFormat {
        /// The storage file.
        path: PathBuf,
        /// The version in the file.
        found: u64,
        /// The version this build reads.
        supported: u64,
    },
    /// The path came to name another file (or none) while it was being
    /// opened: it was deleted, renamed or replaced meanwhile. Open it again.
    #[error("storage file {path:?} was deleted, renamed or replaced while it was being opened")]
    Moved {
        /// The storage file.
        path: PathBuf,
    },
    /// An I/O error (permissions, disk full, a directory that cannot be created, ...).
    #[error("I/O error on storage file {path:?}")]
    Io {
        /// The storage file.
        path: PathBuf,
        /// The error.
        #[source]
        source: io::Error,
    },
    /// Any other error of redb.
    #[error("cannot open storage file {path:?}")]
    Redb {
        /// The storage file.
        path: PathBuf,
        /// redb's error.
        #[source]
        source: Box<redb::Error>,
    },
    /// The blocking open task panicked or was cancelled (the runtime is shutting down).
    #[error("opening {path:?} was interrupted: the blocking task panicked or was cancelled")]
    Interrupted {
        /// The storage file.
        path: PathBuf,
    },
}

impl OpenError {
    /// Classifies a redb error raised while opening `path`.
    pub(crate) fn from_redb(path: PathBuf, err: redb::Error) -> Self {
        match err {
            redb::Error::DatabaseAlreadyOpen | redb::Error::LockProtocolMismatch => {
                OpenError::AlreadyOpen { path }
            }
            redb::Error::Corrupted(ref message) => OpenError::Corrupted {
                path,
                message: message.clone(),
                source: Some(Box::new(err)),
            },
            redb::Error::RepairAborted => OpenError::Corrupted {
                path,
                message: "repair aborted".to_owned(),
                source: Some(Box::new(err)),
            },
            redb::Error::Io(source) => OpenError::Io { path, source },
            source => OpenError::Redb {
                path,
                source: Box::new(source),
            },
        }
    }
}

/// Why [`crate::RedbStorage::close`] failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CloseError {
    /// Other clones of the handle are alive; the file stays open until the
    /// last one is dropped or closed.
    #[error("storage file {path:?} is still used by other handles")]
    InUse {
        /// The storage file.
        path: PathBuf,
    },
    /// redb failed to flush or release the file.
    #[error("closing storage file {path:?} failed: {source}")]
    Redb {
        /// The storage file.
        path: PathBuf,
        /// redb's error.
        #[source]
        source: Box<redb::Error>,
    },
    /// The blocking close task was cancelled or panicked.
    #[error("closing storage file {path:?} was interrupted")]
    Interrupted {
        /// The storage file.
        path: PathBuf,
    },
}

/// A redb error shared by every operation of a failed group commit.
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub(crate) struct SharedError(pub(crate) Arc<redb::Error>);

/// The kind of a redb error that left nothing applied.
pub(crate) fn kind_of(err: &redb::Error) -> ErrorKind {
    match err {
        redb::Error::Io(io) => io_kind(io),
        // redb refuses work after a failed write until the file is reopened,
        // and corruption does not heal: both need an operator.
        _ => ErrorKind::Permanent,
    }
}

/// I/O errors that may clear by themselves are transient; the rest need someone
/// to act (permissions, read-only file system, missing file).
fn io_kind(err: &io::Error) -> ErrorKind {
    use io::ErrorKind as K;
    match err.kind() {
        K::Interrupted
        | K::WouldBlock
        | K::TimedOut
        | K::OutOfMemory
        | K::ResourceBusy
        | K::StorageFull
        | K::QuotaExceeded => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

/// A [`StorageError`] for an operation that was not applied.
pub(crate) fn not_applied(what: &str, err: &Arc<redb::Error>) -> StorageError {
    StorageError::with_source(
        kind_of(err),
        format!("{what}: {err}"),
        SharedError(Arc::clone(err)),
    )
}

/// A [`StorageError`] for a write whose commit failed: it may or may not be on disk.
pub(crate) fn commit_failed(err: &Arc<redb::Error>) -> StorageError {
    StorageError::with_source(
        ErrorKind::OutcomeUnknown,
        format!("commit failed, the write may or may not be on disk: {err}"),
        SharedError(Arc::clone(err)),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds() {
        let full = redb::Error::Io(io::Error::from(io::ErrorKind::StorageFull));
        assert_eq!(kind_of(&full), ErrorKind::Transient);
        let denied = redb::Error::Io(io::Error::from(io::ErrorKind::PermissionDenied));
        assert_eq!(kind_of(&denied), ErrorKind::Permanent);
        assert_eq!(
            kind_of(&redb::Error::Corrupted("x".into())),
            ErrorKind::Permanent
        );
        assert_eq!(kind_of(&redb::Error::PreviousIo), ErrorKind::Permanent);
        let err = commit_failed(&Arc::new(redb::Error::Io(io::Error::other("fsync"))));
        assert!(err.is_outcome_unknown());
        assert!(std::error::Error::source(&err).is_some());
    }

    #[test]
    fn open_errors_name_the_file() {
        let err = OpenError::from_redb("/x/y.redb".into(), redb::Error::DatabaseAlreadyOpen);
        assert!(matches!(err, OpenError::AlreadyOpen { .. }));
        assert!(err.to_string().contains("/x/y.redb"));
        let err = OpenError::from_redb("/x/y.redb".into(), redb::Error::Corrupted("bad".into()));
        assert!(matches!(err, OpenError::Corrupted { .. }));
    }
}

/// Why a `redb://` URL was refused (see [`crate::RedbConfig::from_url`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// What every driver's URL can have wrong: not a URL, not a `redb://`
    /// one, a path that is not UTF-8 once percent-decoded, an unknown
    /// parameter, a parameter given twice.
    #[error(transparent)]
    Url(#[from] ttl_storage::kit::UrlError),
    /// No file path after `redb://`.
    #[error("no file path (expected redb:///path/to/file.redb)")]
    NoPath,
    /// A user, password, port or fragment, which name nothing here.
    #[error("a redb:// URL takes no user, password, port or fragment")]
    Unexpected,
    /// `mode` with another value than `shared` or `exclusive`.
    #[error("bad mode {0:?} (mode=shared or mode=exclusive)")]
    BadMode(String),
    /// `redb://rel/path` (two slashes): a path relative to each process's
    /// current directory, so processes started from different directories
    /// would use different files.
    #[error(
        "{path:?} is relative to the current directory (two slashes after redb:); processes started elsewhere would use another file: write the absolute path, {absolute}"
    )]
    Relative {
        /// The relative path the URL named.
        path: String,
        /// The absolute URL from this process's current directory.
        absolute: String,
    },
}
