//! [`RedbStorage`]: the handle, the operations and closing.

use std::{path::Path, sync::Arc, time::Duration};

use async_trait::async_trait;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use ttl_storage::{Entry, Key, Result, StorageError, Ttl, TtlStorage, check_value};

use crate::{
    CloseError,
    error::not_applied,
    ops::{self, Op},
    record,
    writer::Pending,
};

use super::{
    state::Shared,
    sweep::{self, Sweeper},
};

/// Owned by the clones of one [`RedbStorage`]; dropped with the last clone.
///
/// It stops the sweep and hands its reference to the shared state to a
/// blocking thread, so that closing the file (which writes to it) never runs
/// on the async runtime.
struct Guard {
    shared: Option<Arc<Shared>>,
    sweeper: Option<Sweeper>,
}

impl Drop for Guard {
    fn drop(&mut self) {
        drop(self.sweeper.take());
        if let Some(shared) = self.shared.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(shared))),
                Err(_) => drop(shared),
            }
        }
    }
}

/// A [`TtlStorage`] in a redb file. See the [crate docs](crate) for its guarantees.
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
            shared: Some(Arc::clone(&shared)),
            sweeper,
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
        let pass = self
            .tasks
            .spawn_blocking(move || sweep::sweep_once(&shared.db, limit));
        match pass.await {
            Ok(Ok(removed)) => Ok(removed),
            Ok(Err(err)) => Err(not_applied("sweep failed", &Arc::new(err))),
            Err(err) => Err(StorageError::with_source(
                ttl_storage::ErrorKind::Permanent,
                "sweep task failed",
                err,
            )),
        }
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
        drop(guard.shared.take());
        drop(guard);
        // Blocking tasks of operations that already returned (a drain that
        // found the queue empty) or were cancelled may still hold the state.
        tasks.close();
        tasks.wait().await;
        let Ok(shared) = Arc::try_unwrap(shared) else {
            return Err(CloseError::InUse { path });
        };
        let closing = tokio::task::spawn_blocking(move || shared.db.close());
        match closing.await {
            Ok(Ok(())) => Ok(()),
            Ok(Err(err)) => Err(CloseError::Redb {
                path,
                source: Box::new(err.into()),
            }),
            Err(_) => Err(CloseError::Interrupted { path }),
        }
    }

    /// Queues a conditional write and waits for its committed answer.
    async fn write(&self, op: Op) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        let shared = Arc::clone(&self.shared);
        shared.writer.push(Pending { op, reply });
        // Not awaited: the answer comes through `reply`, possibly from the
        // task of another operation of the same batch.
        drop(
            self.tasks
                .spawn_blocking(move || shared.writer.drain(&shared.db)),
        );
        answer.await.unwrap_or_else(|_| {
            Err(StorageError::outcome_unknown(
                "the write task panicked or was cancelled before answering",
            ))
        })
    }
}

#[async_trait]
impl TtlStorage for RedbStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(value)?;
        self.write(Op::Insert {
            key: key.as_str().to_owned(),
            value: value.to_vec(),
            ttl,
        })
        .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        check_value(old)?;
        check_value(new)?;
        self.write(Op::Swap {
            key: key.as_str().to_owned(),
            old: old.to_vec(),
            new: new.to_vec(),
            ttl,
        })
        .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        check_value(value)?;
        self.write(Op::Delete {
            key: key.as_str().to_owned(),
            value: value.to_vec(),
        })
        .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        Ok(self.get_entry(key).await?.map(|entry| entry.value))
    }

    /// The time left is the stored expiry (wall clock, milliseconds) less
    /// this process's wall clock.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        let shared = Arc::clone(&self.shared);
        let key = key.as_str().to_owned();
        let read = self.tasks.spawn_blocking(move || {
            let now = record::now_millis()?;
            ops::get_record(&shared.db, &key, now)
        });
        match read.await {
            Ok(Ok(record)) => {
                Ok(record.map(|(expires_at, value)| record::entry(expires_at, value)))
            }
            Ok(Err(err)) => Err(not_applied("read failed", &Arc::new(err))),
            Err(err) => Err(StorageError::with_source(
                ttl_storage::ErrorKind::Permanent,
                "read task panicked or was cancelled",
                err,
            )),
        }
    }
}
