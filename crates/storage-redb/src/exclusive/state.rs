//! The state every handle of a [`RedbStorage`](crate::RedbStorage), its
//! blocking tasks and its sweep share.

use std::path::PathBuf;

use redb::Database;

use crate::{handle::FileState, writer::Writer};

/// The state every handle and every blocking task shares.
pub(crate) struct Shared {
    pub(crate) db: Database,
    pub(crate) writer: Writer,
    pub(crate) path: PathBuf,
}

impl Shared {
    /// Wraps an open, checked database.
    pub(crate) fn new(db: Database, path: PathBuf, max_batch: usize) -> Self {
        Shared {
            db,
            writer: Writer::new(max_batch),
            path,
        }
    }
}

impl FileState for Shared {
    fn db(&self) -> &Database {
        &self.db
    }

    fn writer(&self) -> &Writer {
        &self.writer
    }

    fn drain(&self) {
        self.writer.drain(&self.db);
    }
}
