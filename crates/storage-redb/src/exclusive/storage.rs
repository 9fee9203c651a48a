//! [`RedbStorage`]: the handle, the operations and closing.

use std::{path::Path, sync::Arc, time::Duration};

use tokio_util::task::TaskTracker;
use ttl_storage::{Key, Result};

use crate::{
    CloseError,
    handle::{self, CloseOnBlockingThread, ttl_storage_ops},
    ops::Op,
};

use super::{
    state::Shared,
    sweep::{self, Sweeper},
};

/// Owned by the clones of one [`RedbStorage`]; dropped with the last clone.
///
/// It stops the sweep, then hands its reference to the shared state to a
/// blocking thread (fields drop in order).
struct Guard {
    sweeper: Option<Sweeper>,
    state: CloseOnBlockingThread<Shared>,
}

/// A [`TtlStorage`](ttl_storage::TtlStorage) in a redb file. See the [crate docs](crate) for its guarantees.
///
/// Cheap to clone: clones share the open file. The file is closed when the
/// last clone is dropped (and the blocking tasks in flight end), or by
/// [`RedbStorage::close`].
///
/// The background sweep runs on the tokio runtime that opened the file and
/// stops with it, or when the last clone is dropped. A call whose future is
/// dropped (cancelled, timed out) after it was queued may still be applied,
/// as with a network driver: read the record back to find out.
#[derive(Clone)]
pub struct RedbStorage {
    shared: Arc<Shared>,
    guard: Arc<Guard>,
    /// Every blocking task of the operations, so closing can wait for them.
    tasks: TaskTracker,
}

impl std::fmt::Debug for RedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedbStorage")
            .field("path", &self.shared.path)
            .finish_non_exhaustive()
    }
}

impl RedbStorage {
    pub(crate) fn start(shared: Shared, sweep: Option<(Duration, usize)>) -> RedbStorage {
        let shared = Arc::new(shared);
        let sweeper =
            sweep.map(|(interval, limit)| Sweeper::start(Arc::downgrade(&shared), interval, limit));
        let guard = Guard {
            sweeper,
            state: CloseOnBlockingThread(Some(Arc::clone(&shared))),
        };
        RedbStorage {
            shared,
            guard: Arc::new(guard),
            tasks: TaskTracker::new(),
        }
    }

    /// The storage file.
    pub fn path(&self) -> &Path {
        &self.shared.path
    }

    /// Runs one sweep pass now: deletes at most `limit` expired records and
    /// returns how many it deleted. The background sweep does the same
    /// periodically; this is for tests and maintenance.
    pub async fn sweep_now(&self, limit: usize) -> Result<usize> {
        let shared = Arc::clone(&self.shared);
        handle::blocking(&self.tasks, "sweep", move || {
            sweep::sweep_once(&shared.db, limit)
        })
        .await
    }

    /// Closes the file: stops the sweep, waits for the blocking work in flight
    /// and releases the file lock, so the file can be opened again at once.
    ///
    /// Fails with [`CloseError::InUse`] (and closes nothing) while other clones
    /// of this handle are alive.
    pub async fn close(self) -> Result<(), CloseError> {
        let RedbStorage {
            shared,
            guard,
            tasks,
        } = self;
        let path = shared.path.clone();
        let Ok(mut guard) = Arc::try_unwrap(guard) else {
            return Err(CloseError::InUse { path });
        };
        if let Some(sweeper) = guard.sweeper.take() {
            sweeper.stop().await;
        }
        drop(guard.state.0.take());
        drop(guard);
        let shared = handle::take_state(tasks, shared, &path).await?;
        handle::close_database(path, shared.db).await
    }

    /// Queues a conditional write and waits for its committed answer.
    async fn write(&self, op: Op) -> Result<crate::ops::Answer> {
        handle::write(&self.tasks, &self.shared, op).await
    }

    /// Reads the live record under `key` with its stored expiry.
    async fn read(&self, key: &Key) -> Result<Option<(u64, Vec<u8>)>> {
        handle::read(&self.tasks, &self.shared, key).await
    }
}

ttl_storage_ops!(RedbStorage {});
