//! The state every handle of a [`RedbStorage`](crate::RedbStorage), its
//! blocking tasks and its sweep share.

use std::path::PathBuf;

use redb::Database;

use crate::{handle::FileState, identity::FileIdentity, writer::Writer};

/// The state every handle and every blocking task shares.
pub(crate) struct Shared {
    pub(crate) db: Database,
    pub(crate) identity: FileIdentity,
    pub(crate) writer: Writer,
    pub(crate) path: PathBuf,
}

impl Shared {
    /// Wraps an open, checked database.
    pub(crate) fn new(
        db: Database,
        identity: FileIdentity,
        path: PathBuf,
        max_batch: usize,
    ) -> Self {
        Shared {
            db,
            identity,
            writer: Writer::new(max_batch),
            path,
        }
    }
}

impl FileState for Shared {
    fn db(&self) -> &Database {
        &self.db
    }

    fn identity(&self) -> &FileIdentity {
        &self.identity
    }

    fn writer(&self) -> &Writer {
        &self.writer
    }

    fn drain(&self) {
        self.writer.drain(&self.db, &self.identity);
    }
}
