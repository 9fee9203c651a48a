//! [`SharedRedbStorage`]: a storage file several processes of one host use
//! at once, each operation under an exclusive OS file lock.

use std::{
    panic::{AssertUnwindSafe, catch_unwind},
    path::{Path, PathBuf},
    sync::{
        Arc,
        atomic::{AtomicU64, Ordering},
    },
    time::Duration,
};

use async_trait::async_trait;
use tokio::sync::oneshot;
use ttl_storage::{
    Key, Result, StorageError, Ttl, TtlStorage, Watch, WatchUnsupported, check_value,
};

use crate::{
    SharedRedbStorageBuilder,
    change_feed::ChangeFeed,
    error::not_applied,
    lock_file::LockFile,
    ops::{self, Op},
    record::{self, NEVER},
    writer::{self, Failure, Pending, Writer},
};

/// The state every clone and every blocking task of one handle shares.
pub(crate) struct Inner {
    pub(crate) path: PathBuf,
    pub(crate) lock: LockFile,
    pub(crate) writer: Writer,
    pub(crate) sweep_limit: usize,
    pub(crate) cache_size: usize,
    pub(crate) feed: Option<ChangeFeed>,
    /// Written into the lock file to announce a removal.
    pub(crate) generation: AtomicU64,
}

/// A [`TtlStorage`] in a redb file that **several processes on one host**
/// share: the default embedded storage for a cluster of processes on one
/// machine. See the [crate docs](crate#shared-mode) for its guarantees and
/// its cost.
///
/// No process keeps the file open: every batch of this process's writes
/// takes an exclusive OS file lock (`flock`) on `<path>.lock`, opens the
/// redb file, applies the writes in one write transaction, commits it
/// durably (fsync), closes the file and unlocks; every read does the same
/// with a read transaction. All of it runs on tokio's blocking threads.
///
/// Cheap to clone: clones share one lock-file handle, one write queue and one
/// watch of the lock file.
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
}

impl std::fmt::Debug for SharedRedbStorage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SharedRedbStorage")
            .field("path", &self.inner.path)
            .finish_non_exhaustive()
    }
}

impl SharedRedbStorage {
    /// Opens (or creates) the storage file at `path` for sharing, with
    /// default options. See [`SharedRedbStorageBuilder::open`]. Must be
    /// called within a tokio runtime.
    pub async fn open(path: impl AsRef<Path>) -> Result<SharedRedbStorage, crate::OpenError> {
        SharedRedbStorageBuilder::new().open(path).await
    }

    /// A builder to set options before opening.
    pub fn builder() -> SharedRedbStorageBuilder {
        SharedRedbStorageBuilder::new()
    }

    /// The storage file.
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// The lock file beside it (`<path>.lock`). Never delete it while a
    /// process uses the storage: the processes would stop excluding each
    /// other.
    pub fn lock_path(&self) -> &Path {
        self.inner.lock.path()
    }

    /// Queues a conditional write and waits for its committed answer.
    async fn write(&self, op: Op) -> Result<bool> {
        let (reply, answer) = oneshot::channel();
        let inner = Arc::clone(&self.inner);
        inner.writer.push(Pending { op, reply });
        // Not awaited: the answer comes through `reply`, possibly from the
        // task of another operation of the same batch.
        drop(tokio::task::spawn_blocking(move || {
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
        let read = tokio::task::spawn_blocking(move || read_record(&inner, &key));
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

/// Opens the storage file for one batch. The caller holds the lock. A panic
/// of redb (a file damaged outside redb) is an error, not a crash.
fn open_db(inner: &Inner) -> std::result::Result<redb::Database, redb::Error> {
    let mut builder = redb::Builder::new();
    builder.set_cache_size(inner.cache_size);
    catch_unwind(AssertUnwindSafe(|| builder.open(&inner.path)))
        .map_err(|_| redb::Error::Corrupted("redb panicked opening the file".to_owned()))?
        .map_err(redb::Error::from)
}

/// Lock, open, apply and commit durably, close, tell watchers, unlock. Blocks.
fn commit_batch(inner: &Inner, batch: &[Pending]) -> std::result::Result<Vec<bool>, Failure> {
    let not_applied = |what| move |err: redb::Error| Failure::NotApplied(what, Arc::new(err));
    let locked = inner
        .lock
        .lock()
        .map_err(|err| not_applied("cannot lock the lock file")(redb::Error::Io(err)))?;
    let db = open_db(inner).map_err(not_applied("cannot open the storage file"))?;
    let outcome = writer::run(&db, batch, Some(inner.sweep_limit))?;
    // Closed before unlocking: the next process opens a file nobody holds.
    drop(db);
    if outcome.deleted {
        let generation = inner.generation.fetch_add(1, Ordering::Relaxed);
        if let Err(err) = locked.announce_removal(generation) {
            // The delete stands; watchers of other processes poll instead.
            tracing::warn!(error = %err, "cannot announce a removal in the lock file");
        }
    }
    drop(locked);
    Ok(outcome.answers)
}

/// Lock, open, read, close, unlock. Blocks.
fn read_record(
    inner: &Inner,
    key: &str,
) -> std::result::Result<Option<(u64, Vec<u8>)>, redb::Error> {
    let _locked = inner.lock.lock().map_err(redb::Error::Io)?;
    let db = open_db(inner)?;
    let now = record::now_millis()?;
    ops::get_record(&db, key, now)
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

    /// Completes when any process deletes a record of this file (inotify on
    /// the lock file), at the record's stored expiry (wall clock), at once
    /// when the key holds no live record, and on a read error.
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        let feed = self.inner.feed.as_ref().ok_or(WatchUnsupported)?;
        // Subscribed before the record is read: a delete after this is seen.
        let mut changes = feed.subscribe();
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
