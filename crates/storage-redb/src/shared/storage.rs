//! [`SharedRedbStorage`]: a storage file several processes of one host use
//! at once, through redb's multi-writer mode.

use std::{
    path::{Path, PathBuf},
    sync::Arc,
    time::Duration,
};

use async_trait::async_trait;
use redb::Database;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use ttl_storage::{
    Entry, Key, Result, StorageError, Ttl, TtlStorage, Watch, WatchUnsupported, check_value,
};

use crate::{
    CloseError,
    error::not_applied,
    ops::{self, Op},
    record::{self, NEVER},
    watch::{ChangeFeed, EventsFile},
    writer::{self, Failure, Pending, Writer},
};

/// The state every clone and every blocking task of one handle shares.
pub(crate) struct Inner {
    pub(crate) db: Database,
    pub(crate) path: PathBuf,
    pub(crate) events: EventsFile,
    pub(crate) writer: Writer,
    pub(crate) sweep_limit: usize,
    pub(crate) feed: Option<ChangeFeed>,
}

/// A [`TtlStorage`] in a redb file that **several processes on one host**
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
    _close: Arc<CloseOnBlockingThread>,
    /// Every blocking task of the operations, so closing can wait for them.
    tasks: TaskTracker,
}

/// Owned by the clones of one handle: when the last one is dropped, hands
/// its reference to the state to a blocking thread, so that closing the file
/// (redb writes on close) never runs on the async runtime.
struct CloseOnBlockingThread(Option<Arc<Inner>>);

impl Drop for CloseOnBlockingThread {
    fn drop(&mut self) {
        if let Some(inner) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(inner))),
                Err(_) => drop(inner),
            }
        }
    }
}

impl std::fmt::Debug for SharedRedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRedbStorage")
            .field("path", &self.inner.path)
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
        &self.inner.path
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
        let path = inner.path.clone();
        let Ok(mut close) = Arc::try_unwrap(_close) else {
            return Err(CloseError::InUse { path });
        };
        drop(close.0.take());
        // Blocking tasks of operations that already returned (a drain that
        // found the queue empty) or were cancelled may still hold the state.
        tasks.close();
        tasks.wait().await;
        let Ok(inner) = Arc::try_unwrap(inner) else {
            return Err(CloseError::InUse { path });
        };
        let Inner { db, feed, .. } = inner;
        drop(feed);
        match tokio::task::spawn_blocking(move || db.close()).await {
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
        let inner = Arc::clone(&self.inner);
        inner.writer.push(Pending { op, reply });
        // Not awaited: the answer comes through `reply`, possibly from the
        // task of another operation of the same batch.
        drop(self.tasks.spawn_blocking(move || {
            inner.writer.drain_with(|batch| commit_batch(&inner, batch));
        }));
        answer.await.unwrap_or_else(|_| {
            Err(StorageError::outcome_unknown(
                "the write task panicked or was cancelled before answering",
            ))
        })
    }

    /// Reads the live record under `key` with its stored expiry.
    async fn read(&self, key: &Key) -> Result<Option<(u64, Vec<u8>)>> {
        let inner = Arc::clone(&self.inner);
        let key = key.as_str().to_owned();
        let read = self.tasks.spawn_blocking(move || {
            let now = record::now_millis()?;
            ops::get_record(&inner.db, &key, now)
        });
        match read.await {
            Ok(Ok(value)) => Ok(value),
            Ok(Err(err)) => Err(not_applied("read failed", &Arc::new(err))),
            Err(err) => Err(StorageError::with_source(
                ttl_storage::ErrorKind::Permanent,
                "read task panicked or was cancelled",
                err,
            )),
        }
    }
}

/// Applies and commits a batch durably (redb takes the cross-process writer
/// lock in `begin_write`), then tells watchers of a delete. Blocks.
fn commit_batch(inner: &Inner, batch: &[Pending]) -> std::result::Result<Vec<bool>, Failure> {
    let outcome = writer::run(&inner.db, batch, Some(inner.sweep_limit))?;
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

#[async_trait]
impl TtlStorage for SharedRedbStorage {
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
        Ok(self.read(key).await?.map(|(_, value)| value))
    }

    /// The time left is the stored expiry (wall clock, milliseconds) less
    /// this process's wall clock.
    async fn get_entry(&self, key: &Key) -> Result<Option<Entry>> {
        Ok(self
            .read(key)
            .await?
            .map(|(expires_at, value)| record::entry(expires_at, value)))
    }

    /// Completes when any process deletes a record of this file (inotify on
    /// the events file), at the record's stored expiry (wall clock), at once
    /// when the key holds no live record, and on a read error.
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        // Subscribed before the record is read: a delete after this is seen.
        let mut changes = self
            .inner
            .feed
            .as_ref()
            .and_then(ChangeFeed::subscribe)
            .ok_or(WatchUnsupported)?;
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
}
