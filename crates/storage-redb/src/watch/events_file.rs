//! The events file beside a shared storage file: every process writes to it
//! after committing a delete, and every process's watches are told of that
//! write through inotify (see [`crate::watch::ChangeFeed`]). Opening processes
//! also lock it, so that they never see each other's half-created file.

use std::{
    fs::{File, OpenOptions},
    io,
    os::unix::fs::FileExt,
    path::{Path, PathBuf},
    sync::atomic::{AtomicU64, Ordering},
};

/// The events file of one shared storage file, opened once per handle.
pub(crate) struct EventsFile {
    file: File,
    path: PathBuf,
    /// Written into the file; its value does not matter, the write does.
    generation: AtomicU64,
}

/// Holds the opening lock of the events file; unlocks on drop.
pub(crate) struct Opening<'a> {
    file: &'a File,
}

impl Drop for Opening<'_> {
    fn drop(&mut self) {
        if let Err(err) = self.file.unlock() {
            tracing::warn!(error = %err, "cannot unlock the events file");
        }
    }
}

impl EventsFile {
    /// The events file of the storage file `storage`: the same path with
    /// `.events` appended.
    pub(crate) fn path_for(storage: &Path) -> PathBuf {
        let mut name = storage.as_os_str().to_owned();
        name.push(".events");
        PathBuf::from(name)
    }

    /// Opens (or creates) the events file at `path`. Blocks.
    pub(crate) fn open(path: PathBuf) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)?;
        Ok(EventsFile {
            file,
            path,
            generation: AtomicU64::new(0),
        })
    }

    /// The file's path.
    pub(crate) fn path(&self) -> &Path {
        &self.path
    }

    /// Takes an exclusive OS lock (`flock`) of the file, held until the
    /// returned guard is dropped: processes opening the storage file at once
    /// take turns. Blocks.
    pub(crate) fn lock_for_opening(&self) -> io::Result<Opening<'_>> {
        self.file.lock()?;
        Ok(Opening { file: &self.file })
    }

    /// Tells watching processes that a record was removed: an 8-byte write
    /// at offset 0, which inotify reports as a modification. Blocks.
    pub(crate) fn announce_removal(&self) -> io::Result<()> {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        self.file.write_all_at(&generation.to_le_bytes(), 0)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn path_appends_events() {
        assert_eq!(
            EventsFile::path_for(Path::new("/d/leases.redb")),
            PathBuf::from("/d/leases.redb.events")
        );
    }

    #[test]
    fn announcing_writes_the_file() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("x.events");
        let events = EventsFile::open(path.clone()).unwrap();
        events.announce_removal().unwrap();
        events.announce_removal().unwrap();
        assert_eq!(std::fs::read(&path).unwrap(), 1u64.to_le_bytes());
    }
}
