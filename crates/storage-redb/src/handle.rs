//! What the handles of both modes share: queuing a write for the group
//! commit, running file work on a tracked blocking thread, closing the
//! file, and the [`TtlStorage`](ttl_storage::TtlStorage) operations built
//! on those ([`ttl_storage_ops!`]).

use std::{
    path::{Path, PathBuf},
    sync::Arc,
};

use redb::Database;
use tokio::sync::oneshot;
use tokio_util::task::TaskTracker;
use ttl_storage::{ErrorKind, Key, Result, StorageError};

use crate::{
    CloseError,
    error::not_applied,
    identity::FileIdentity,
    ops::{self, Answer, Op},
    record,
    writer::{Pending, Writer},
};

/// An open, checked storage file and this process's queue of writes to
/// it: the state of an exclusive handle, and the core of a shared one's.
pub(crate) struct OpenFile {
    /// The open database.
    pub(crate) db: Database,
    /// The identity of the open file, which its path must still name.
    pub(crate) identity: FileIdentity,
    /// The queue of this process's writes.
    pub(crate) writer: Writer,
    /// The path the file was opened at.
    pub(crate) path: PathBuf,
}

impl OpenFile {
    /// Wraps an open, checked database; its writes are group-committed
    /// `max_batch` at most at a time.
    pub(crate) fn new(
        db: Database,
        identity: FileIdentity,
        path: PathBuf,
        max_batch: usize,
    ) -> Self {
        OpenFile {
            db,
            identity,
            writer: Writer::new(max_batch),
            path,
        }
    }
}

/// The state of one open file that a handle's clones and blocking tasks
/// share.
pub(crate) trait FileState: Send + Sync + 'static {
    /// The open file and its write queue.
    fn file(&self) -> &OpenFile;

    /// Applies and commits the queued writes, if any. Blocks. By default
    /// the batch is committed as it is, with nothing beside it.
    fn drain(&self) {
        let file = self.file();
        file.writer.drain(&file.db, &file.identity);
    }
}

/// Queues a conditional write and waits for its committed answer.
pub(crate) async fn write<S: FileState>(
    tasks: &TaskTracker,
    state: &Arc<S>,
    op: Op,
) -> Result<Answer> {
    let (reply, answer) = oneshot::channel();
    state.file().writer.push(Pending { op, reply });
    let state = Arc::clone(state);
    // Not awaited: the answer comes through `reply`, possibly from the task
    // of another operation of the same batch.
    drop(tasks.spawn_blocking(move || state.drain()));
    answer.await.unwrap_or_else(|_| {
        Err(StorageError::outcome_unknown(
            "the write task panicked or was cancelled before answering",
        ))
    })
}

/// Reads the live record under `key` with its stored expiry.
pub(crate) async fn read<S: FileState>(
    tasks: &TaskTracker,
    state: &Arc<S>,
    key: &Key,
) -> Result<Option<(u64, Vec<u8>)>> {
    let state = Arc::clone(state);
    let key = key.as_str().to_owned();
    let checked = Arc::clone(&state);
    let lost = tasks
        .spawn_blocking(move || checked.file().identity.check())
        .await
        .unwrap_or_else(|_| Err(StorageError::transient("the identity check was cancelled")));
    lost?;
    blocking(tasks, "read", move || {
        ops::get_record(&state.file().db, &key, record::now_millis()?)
    })
    .await
}

/// Runs `work` (`what`, in errors) on a blocking thread `tasks` tracks.
pub(crate) async fn blocking<T: Send + 'static>(
    tasks: &TaskTracker,
    what: &'static str,
    work: impl FnOnce() -> std::result::Result<T, redb::Error> + Send + 'static,
) -> Result<T> {
    match tasks.spawn_blocking(work).await {
        Ok(Ok(done)) => Ok(done),
        Ok(Err(err)) => Err(not_applied(&format!("{what} failed"), &Arc::new(err))),
        Err(err) => Err(StorageError::with_source(
            ErrorKind::Permanent,
            format!("{what} task panicked or was cancelled"),
            err,
        )),
    }
}

/// Owned by the clones of one handle: when the last one is dropped, hands
/// its reference to the state to a blocking thread, so that closing the file
/// (redb writes on close) never runs on the async runtime.
pub(crate) struct CloseOnBlockingThread<S: Send + Sync + 'static>(pub(crate) Option<Arc<S>>);

impl<S: Send + Sync + 'static> Drop for CloseOnBlockingThread<S> {
    fn drop(&mut self) {
        if let Some(state) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => drop(runtime.spawn_blocking(move || drop(state))),
                Err(_) => drop(state),
            }
        }
    }
}

/// Waits for the blocking work in flight (operations that already returned,
/// or were cancelled, may still hold the state), then takes the state if
/// no other clone holds it.
pub(crate) async fn take_state<S>(
    tasks: TaskTracker,
    state: Arc<S>,
    path: &Path,
) -> std::result::Result<S, CloseError> {
    tasks.close();
    tasks.wait().await;
    Arc::try_unwrap(state).map_err(|_| CloseError::InUse {
        path: path.to_path_buf(),
    })
}

/// Closes `db` on a blocking thread, releasing the file's locks.
pub(crate) async fn close_database(
    path: PathBuf,
    db: Database,
) -> std::result::Result<(), CloseError> {
    match tokio::task::spawn_blocking(move || db.close()).await {
        Ok(Ok(())) => Ok(()),
        Ok(Err(err)) => Err(CloseError::Redb {
            path,
            source: Box::new(err.into()),
        }),
        Err(_) => Err(CloseError::Interrupted { path }),
    }
}

/// Implements [`TtlStorage`](ttl_storage::TtlStorage) for a handle type
/// with `async fn write(&self, Op) -> Result<Answer>` and
/// `async fn read(&self, &Key) -> Result<Option<(u64, Vec<u8>)>>`, plus the
/// extra methods given (`watch`).
macro_rules! ttl_storage_ops {
    ($handle:ty { $($extra:item)* }) => {
        #[async_trait::async_trait]
        impl ttl_storage::TtlStorage for $handle {
            async fn insert_if_not_exists(
                &self,
                key: &ttl_storage::Key,
                value: &[u8],
                ttl: ttl_storage::Ttl,
            ) -> ttl_storage::Result<bool> {
                ttl_storage::check_value(value)?;
                self.write($crate::ops::Op::Insert {
                    key: key.as_str().to_owned(),
                    value: value.to_vec(),
                    ttl,
                })
                .await
                .map(|answer| answer.applied())
            }

            async fn compare_and_swap(
                &self,
                key: &ttl_storage::Key,
                old: &[u8],
                new: &[u8],
                ttl: ttl_storage::Ttl,
            ) -> ttl_storage::Result<bool> {
                ttl_storage::check_value(old)?;
                ttl_storage::check_value(new)?;
                self.write($crate::ops::Op::Swap {
                    key: key.as_str().to_owned(),
                    old: old.to_vec(),
                    new: new.to_vec(),
                    ttl,
                })
                .await
                .map(|answer| answer.applied())
            }

            async fn compare_and_delete(
                &self,
                key: &ttl_storage::Key,
                value: &[u8],
            ) -> ttl_storage::Result<bool> {
                ttl_storage::check_value(value)?;
                self.write($crate::ops::Op::Delete {
                    key: key.as_str().to_owned(),
                    value: value.to_vec(),
                })
                .await
                .map(|answer| answer.applied())
            }

            /// One write transaction: the record's condition, the
            /// counter's advance and both writes, committed durably once.
            async fn write_counted(
                &self,
                write: ttl_storage::CountedWrite<'_>,
            ) -> ttl_storage::Result<ttl_storage::Counted> {
                if let Some(old) = write.expected {
                    ttl_storage::check_value(old)?;
                }
                ttl_storage::check_value(write.value)?;
                let answer = self
                    .write($crate::ops::Op::Counted {
                        key: write.key.as_str().to_owned(),
                        old: write.expected.map(<[u8]>::to_vec),
                        new: write.value.to_vec(),
                        ttl: write.ttl,
                        counter: write.counter.as_str().to_owned(),
                        floor: write.floor,
                        max: write.max,
                    })
                    .await?;
                match answer {
                    $crate::ops::Answer::Counted(Some(n)) => Ok(ttl_storage::Counted::Written(n)),
                    $crate::ops::Answer::CounterRefused(why) => {
                        Err(ttl_storage::StorageError::permanent(why))
                    }
                    _ => Ok(ttl_storage::Counted::Refused),
                }
            }

            async fn get(&self, key: &ttl_storage::Key) -> ttl_storage::Result<Option<Vec<u8>>> {
                Ok(self.read(key).await?.map(|(_, value)| value))
            }

            /// The time left is the stored expiry (wall clock, milliseconds)
            /// less this process's wall clock.
            async fn get_entry(
                &self,
                key: &ttl_storage::Key,
            ) -> ttl_storage::Result<Option<ttl_storage::Entry>> {
                Ok(self
                    .read(key)
                    .await?
                    .map(|(expires_at, value)| $crate::record::entry(expires_at, value)))
            }

            $($extra)*
        }
    };
}

pub(crate) use ttl_storage_ops;
