//! The store's identity: the file a handle has open must still be the one
//! its path names.
//!
//! A lease lives in a file; other processes find that file by its path. If
//! the path comes to name another file — the file deleted (a cleanup
//! script, `rm -rf ~/.local/share`), renamed away, or replaced (a backup
//! restored with `cp` and `mv`) — a process that opens the path now elects
//! over another store, where the lease this handle holds does not exist.
//! So every operation first checks that the path still names the open file
//! (same device and inode, one `stat`), and fails with a permanent error
//! otherwise: the store is lost, and a leader on it stops as for any store
//! that fails (see `docs/guarantees.md`).

use std::{
    fs::File,
    io,
    os::unix::fs::MetadataExt,
    path::{Path, PathBuf},
};

use ttl_storage::StorageError;

/// The device and inode of the file a handle has open, and its path.
#[derive(Debug, Clone)]
pub(crate) struct FileIdentity {
    path: PathBuf,
    dev: u64,
    ino: u64,
}

impl FileIdentity {
    /// The identity of `file`, opened at `path`.
    pub(crate) fn of(file: &File, path: &Path) -> io::Result<FileIdentity> {
        let meta = file.metadata()?;
        Ok(FileIdentity {
            path: path.to_path_buf(),
            dev: meta.dev(),
            ino: meta.ino(),
        })
    }

    /// Whether `path` still names the open file: `Ok(true)` if it does,
    /// `Ok(false)` if it names another file or none. Blocks (one `stat`).
    pub(crate) fn holds(&self) -> io::Result<bool> {
        match std::fs::metadata(&self.path) {
            Ok(meta) => Ok(meta.dev() == self.dev && meta.ino() == self.ino),
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(false),
            Err(err) => Err(err),
        }
    }

    /// `Ok` while `path` names the open file; else the error every
    /// operation of a lost store fails with (permanent). A `stat` that fails
    /// otherwise (permissions, I/O) is a transient error: nothing is known.
    /// Blocks.
    pub(crate) fn check(&self) -> Result<(), StorageError> {
        match self.holds() {
            Ok(true) => Ok(()),
            Ok(false) => Err(StorageError::permanent(format!(
                "storage file {:?} no longer names the file this process has open (it was deleted, renamed or replaced): the store is lost; another process opening the path uses another store",
                self.path
            ))),
            Err(err) => Err(StorageError::with_source(
                ttl_storage::ErrorKind::Transient,
                format!(
                    "cannot check that {:?} is still the storage file",
                    self.path
                ),
                err,
            )),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use super::*;

    #[test]
    fn a_deleted_renamed_or_replaced_file_is_not_held() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("f");
        let file = File::create(&path).unwrap();
        let identity = FileIdentity::of(&file, &path).unwrap();
        assert!(identity.holds().unwrap());
        identity.check().unwrap();

        std::fs::rename(&path, dir.path().join("g")).unwrap();
        assert!(!identity.holds().unwrap());
        let err = identity.check().unwrap_err();
        assert_eq!(err.kind(), ttl_storage::ErrorKind::Permanent);
        assert!(err.to_string().contains("no longer names"), "{err}");

        std::fs::write(&path, b"another").unwrap();
        assert!(!identity.holds().unwrap(), "replaced");
        std::fs::remove_file(&path).unwrap();
        assert!(!identity.holds().unwrap(), "deleted");
    }
}
