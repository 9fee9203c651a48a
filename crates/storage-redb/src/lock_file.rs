//! The lock file beside a shared storage file: an exclusive OS file lock
//! (`flock(2)`) on it serialises the processes that share the storage file,
//! and a write to it after every committed delete is what other processes'
//! watches are notified of (inotify).

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::{Mutex, MutexGuard, PoisonError},
};

/// The lock file of one shared storage file, opened once per handle.
pub(crate) struct LockFile {
    /// The open file. The mutex serialises the threads of this process:
    /// `flock` locks belong to the open file, so two threads of one process
    /// would both "hold" it.
    file: Mutex<File>,
    path: PathBuf,
}

/// Held while this process owns the storage file; unlocks on drop.
pub(crate) struct Locked<'a> {
    file: MutexGuard<'a, File>,
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        if let Err(err) = self.file.unlock() {
            // Closing the file would release it; the handle keeps it open, so
            // say so loudly. The next lock by this process still succeeds.
            tracing::warn!(error = %err, "cannot unlock the storage lock file");
        }
    }
}

impl Locked<'_> {
    /// Tells watching processes that a record was removed: writes a counter
    /// into the lock file, which inotify reports as a modification.
    pub(crate) fn announce_removal(&self, generation: u64) -> io::Result<()> {
        self.file.write_all_at(&generation.to_le_bytes(), 0)
    }
}

impl LockFile {
    /// The lock file of the storage file `storage`: the same path with
    /// `.lock` appended.
    pub(crate) fn path_for(storage: &Path) -> PathBuf {
        let mut name = storage.as_os_str().to_owned();
        name.push(".lock");
        PathBuf::from(name)
    }

    /// Opens (or creates) the lock file at `path`. Blocks.
    pub(crate) fn open(path: PathBuf) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        Ok(LockFile {
            file: Mutex::new(file),
            path,
        })
    }

    /// The lock file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Waits until this thread holds the lock of every process. Blocks.
    pub(crate) fn lock(&self) -> io::Result<Locked<'_>> {
        let file = self.file.lock().unwrap_or_else(PoisonError::into_inner);
        file.lock()?;
        Ok(Locked { file })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_appends_lock() {
        assert_eq!(
            LockFile::path_for(Path::new("/d/leases.redb")),
            PathBuf::from("/d/leases.redb.lock")
        );
    }

    #[test]
    fn a_second_open_file_waits_for_the_lock() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.lock");
        let first = LockFile::open(path.clone()).unwrap();
        let other = File::open(&path).unwrap();
        let held = first.lock().unwrap();
        assert!(other.try_lock().is_err());
        held.announce_removal(7).unwrap();
        drop(held);
        other.try_lock().unwrap();
        other.unlock().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), 7u64.to_le_bytes());
    }
}
