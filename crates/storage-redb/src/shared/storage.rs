//! [`SharedRedbStorage`]: a storage file several processes of one host use
//! at once, through redb's multi-writer mode.

use std::{path::Path, sync::Arc, time::Duration};

use tokio_util::task::TaskTracker;
use ttl_storage::{Key, Result};

use crate::{
    CloseError,
    handle::{self, CloseOnBlockingThread, FileState, OpenFile, ttl_storage_ops},
    ops::Op,
    record::{self, NEVER},
    watch::{ChangeFeed, EventsFile},
    writer::{self, Failure, Pending},
};

/// The state every clone and every blocking task of one handle shares.
pub(crate) struct Inner {
    pub(crate) file: OpenFile,
    pub(crate) events: EventsFile,
    pub(crate) sweep_limit: usize,
    pub(crate) feed: Option<ChangeFeed>,
}

impl FileState for Inner {
    fn file(&self) -> &OpenFile {
        &self.file
    }

    /// Commits with the sweep of expired records, and announces removals
    /// to the other processes.
    fn drain(&self) {
        self.file
            .writer
            .drain_with(&self.file.identity, |batch| commit_batch(self, batch));
    }
}

/// A [`TtlStorage`](ttl_storage::TtlStorage) in a redb file that **several processes on one host**
/// share: the embedded storage for a cluster of processes on one machine.
/// See the [crate docs](crate#shared-mode) for its guarantees and its cost.
///
/// Every process opens the file in redb's multi-writer mode
/// ([`redb::ConcurrencyMode::MultiWriter`]): redb serialises the write
/// transactions of all processes with OS byte-range locks on the file, and
/// each commit is durable (fsync, two-phase) before it is visible to the
/// others. This process's concurrent writes are group-committed, as in
/// [`RedbStorage`](crate::RedbStorage). All file work runs on tokio's
/// blocking threads.
///
/// Cheap to clone: clones share the open file, the write queue and the
/// watch of the events file.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use storage_redb::SharedRedbStorage;
/// use ttl_storage::{Key, Ttl, TtlStorage};
///
/// let dir = tempfile::tempdir()?;
/// let path = dir.path().join("leases.redb");
/// // Two handles on one file, as two processes would have.
/// let a = SharedRedbStorage::open(&path).await?;
/// let b = SharedRedbStorage::open(&path).await?;
///
/// let key = Key::new("leader/1")?;
/// let ttl = Ttl::from_secs(20)?;
/// assert!(a.insert_if_not_exists(&key, b"10.0.0.7", ttl).await?);
/// assert!(!b.insert_if_not_exists(&key, b"10.0.0.8", ttl).await?);
///
/// // b waits for the record to go; a's delete wakes it at once.
/// let released = b.watch(&key)?;
/// assert!(a.compare_and_delete(&key, b"10.0.0.7").await?);
/// released.await;
/// assert!(b.insert_if_not_exists(&key, b"10.0.0.8", ttl).await?);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct SharedRedbStorage {
    pub(crate) inner: Arc<Inner>,
    _close: Arc<CloseOnBlockingThread<Inner>>,
    /// Every blocking task of the operations, so closing can wait for them.
    tasks: TaskTracker,
}

impl std::fmt::Debug for SharedRedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRedbStorage")
            .field("path", &self.inner.file.path)
            .finish_non_exhaustive()
    }
}

impl SharedRedbStorage {
    pub(crate) fn new(inner: Inner) -> Self {
        let inner = Arc::new(inner);
        SharedRedbStorage {
            _close: Arc::new(CloseOnBlockingThread(Some(Arc::clone(&inner)))),
            inner,
            tasks: TaskTracker::new(),
        }
    }

    /// The storage file.
    pub fn path(&self) -> &Path {
        &self.inner.file.path
    }

    /// The events file beside it (`<path>.events`), written after every
    /// delete so that other processes' watches wake. Deleting it while
    /// processes run only makes their waiters poll.
    pub fn events_path(&self) -> &Path {
        self.inner.events.path()
    }

    /// Closes the file: waits for the blocking work in flight, stops the
    /// watch of the events file and releases the file's locks, so that a
    /// [`RedbStorage`](crate::RedbStorage) of this process can open it at
    /// once. Dropping the last clone closes it too, shortly after, from a
    /// blocking thread.
    ///
    /// Fails with [`CloseError::InUse`] (and closes nothing) while other
    /// clones of this handle are alive (a pending watch holds one).
    pub async fn close(self) -> Result<(), CloseError> {
        let SharedRedbStorage {
            inner,
            _close,
            tasks,
        } = self;
        let path = inner.file.path.clone();
        let Ok(mut close) = Arc::try_unwrap(_close) else {
            return Err(CloseError::InUse { path });
        };
        drop(close.0.take());
        let Inner { file, feed, .. } = handle::take_state(tasks, inner, &path).await?;
        drop(feed);
        handle::close_database(path, file.db).await
    }

    /// Queues a conditional write and waits for its committed answer.
    async fn write(&self, op: Op) -> Result<crate::ops::Answer> {
        handle::write(&self.tasks, &self.inner, op).await
    }

    /// Reads the live record under `key` with its stored expiry.
    async fn read(&self, key: &Key) -> Result<Option<(u64, Vec<u8>)>> {
        handle::read(&self.tasks, &self.inner, key).await
    }
}

/// Applies and commits a batch durably (redb takes the cross-process writer
/// lock in `begin_write`), then tells watchers of a delete. Blocks.
fn commit_batch(
    inner: &Inner,
    batch: &[Pending],
) -> std::result::Result<Vec<crate::ops::Answer>, Failure> {
    let outcome = writer::run(&inner.file.db, batch, Some(inner.sweep_limit))?;
    if outcome.deleted
        && let Err(err) = inner.events.announce_removal()
    {
        // The delete stands; watchers of other processes poll instead.
        tracing::warn!(error = %err, "cannot announce a removal in the events file");
    }
    Ok(outcome.answers)
}

/// Time from now (wall clock) until the stored expiry `expires_at`, plus a
/// millisecond so the record is surely gone when it elapses.
fn until(expires_at: u64) -> Duration {
    let now = record::now_millis().unwrap_or(u64::MAX);
    Duration::from_millis(expires_at.saturating_sub(now).saturating_add(1))
}

ttl_storage_ops!(SharedRedbStorage {
    /// Completes when any process deletes a record of this file (inotify on
    /// the events file), at the record's stored expiry (wall clock), at once
    /// when the key holds no live record, and on a read error.
    fn watch(
        &self,
        key: &Key,
    ) -> std::result::Result<ttl_storage::Watch, ttl_storage::WatchUnsupported> {
        // Subscribed before the record is read: a delete after this is seen.
        let mut changes = self
            .inner
            .feed
            .as_ref()
            .and_then(ChangeFeed::subscribe)
            .ok_or(ttl_storage::WatchUnsupported)?;
        let storage = self.clone();
        let key = key.clone();
        Ok(Box::pin(async move {
            let expires_at = match storage.read(&key).await {
                Ok(Some((expires_at, _))) => expires_at,
                // Gone already, or unreadable: let the waiter look.
                Ok(None) | Err(_) => return,
            };
            let expiry = async {
                if expires_at == NEVER {
                    std::future::pending::<()>().await;
                } else {
                    tokio::time::sleep(until(expires_at)).await;
                }
            };
            tokio::select! {
                _ = changes.changed() => {}
                () = expiry => {}
            }
        }))
    }
});
