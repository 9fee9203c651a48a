//! Group commit: concurrent conditional writes share one write transaction
//! and one fsync.
//!
//! Every operation is queued, then a blocking task is spawned for it. The
//! first of those tasks to take the commit lock drains the queue (up to the
//! batch limit), applies the drained operations in order in one write
//! transaction, commits it durably and only then answers each of them. The
//! others find the queue empty (or drain what came in meanwhile). Since every
//! queued operation has a task of its own behind it, none is left waiting.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, MutexGuard},
};

use redb::{Database, Durability};
use tokio::sync::oneshot;
use ttl_storage::StorageError;

use crate::{
    error::{commit_failed, not_applied},
    identity::FileIdentity,
    ops::{Answer, Op, Tables},
    record,
};

/// A queued operation and where its answer goes.
pub(crate) struct Pending {
    /// The operation.
    pub(crate) op: Op,
    /// Receives the answer once the transaction is committed (or aborted).
    pub(crate) reply: oneshot::Sender<Result<Answer, StorageError>>,
}

/// The queue of conditional writes of one database.
pub(crate) struct Writer {
    queue: Mutex<VecDeque<Pending>>,
    commit: Mutex<()>,
    max_batch: usize,
}

/// Locks `mutex`, ignoring poisoning: the guarded state (a queue, or nothing)
/// stays consistent when a holder panics.
fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Writer {
    /// A writer committing at most `max_batch` operations per transaction.
    pub(crate) fn new(max_batch: usize) -> Self {
        Writer {
            queue: Mutex::new(VecDeque::new()),
            commit: Mutex::new(()),
            max_batch,
        }
    }

    /// Queues an operation. Call [`Writer::drain`] on a blocking thread after.
    pub(crate) fn push(&self, pending: Pending) {
        lock(&self.queue).push_back(pending);
    }

    /// Applies and commits the queued operations, if any, while the path
    /// still names the open file. Blocks.
    pub(crate) fn drain(&self, db: &Database, identity: &FileIdentity) {
        self.drain_with(identity, |batch| {
            run(db, batch, None).map(|outcome| outcome.answers)
        });
    }

    /// Takes the queued operations (up to the batch limit), if any, and,
    /// once `identity` says the path still names the open file, hands them
    /// to `commit` and answers each with its result (else each fails: the
    /// store is lost, see [`FileIdentity`]). Blocks; one drain at a time.
    pub(crate) fn drain_with(
        &self,
        identity: &FileIdentity,
        commit: impl FnOnce(&[Pending]) -> Result<Vec<Answer>, Failure>,
    ) {
        let _commit = lock(&self.commit);
        let batch: Vec<Pending> = {
            let mut queue = lock(&self.queue);
            let n = queue.len().min(self.max_batch);
            queue.drain(..n).collect()
        };
        if batch.is_empty() {
            return;
        }
        let span = tracing::trace_span!("group_commit", ops = batch.len());
        let _enter = span.enter();
        if let Err(lost) = identity.check() {
            tracing::warn!(error = %lost, ops = batch.len(), "writes refused");
            let message = lost.to_string();
            for pending in batch {
                let again = match lost.kind() {
                    ttl_storage::ErrorKind::Permanent => StorageError::permanent(message.clone()),
                    _ => StorageError::transient(message.clone()),
                };
                let _ = pending.reply.send(Err(again));
            }
            return;
        }
        match commit(&batch) {
            Ok(answers) => {
                for (pending, answer) in batch.into_iter().zip(answers) {
                    // The caller may have gone away; its write stands anyway.
                    let _ = pending.reply.send(Ok(answer));
                }
            }
            Err(failure) => {
                tracing::warn!(error = %failure.error(), ops = batch.len(), "group commit failed");
                for pending in batch {
                    let _ = pending.reply.send(Err(failure.to_storage_error()));
                }
            }
        }
    }
}

/// How a batch failed.
pub(crate) enum Failure {
    /// Nothing was applied.
    NotApplied(&'static str, Arc<redb::Error>),
    /// The commit failed: the batch may or may not be on disk.
    Commit(Arc<redb::Error>),
}

impl Failure {
    fn error(&self) -> &redb::Error {
        match self {
            Failure::NotApplied(_, err) | Failure::Commit(err) => err,
        }
    }

    fn to_storage_error(&self) -> StorageError {
        match self {
            Failure::NotApplied(what, err) => not_applied(what, err),
            Failure::Commit(err) => commit_failed(err),
        }
    }
}

/// What a committed batch did.
pub(crate) struct Outcome {
    /// One answer per operation, in order.
    pub(crate) answers: Vec<Answer>,
    /// True when a delete succeeded: waiters for removals must be told.
    pub(crate) deleted: bool,
}

/// Applies `batch` in one write transaction, then sweeps at most `sweep`
/// expired records in it, and commits it durably if it changed anything.
pub(crate) fn run(
    db: &Database,
    batch: &[Pending],
    sweep: Option<usize>,
) -> Result<Outcome, Failure> {
    let fail = |what| move |err: redb::Error| Failure::NotApplied(what, Arc::new(err));
    let mut txn = db
        .begin_write()
        .map_err(|err| fail("cannot begin a write transaction")(err.into()))?;
    txn.set_durability(Durability::Immediate)
        .map_err(|err| fail("cannot request durability")(err.into()))?;
    let now = record::now_millis().map_err(fail("cannot read the system clock"))?;
    let mut answers = Vec::with_capacity(batch.len());
    let mut dirty = false;
    let mut deleted = false;
    {
        let mut tables = Tables::open(&txn).map_err(fail("cannot open the tables"))?;
        for pending in batch {
            let applied = tables
                .apply(&pending.op, now)
                .map_err(fail("cannot apply the write"))?;
            dirty |= applied.dirty;
            deleted |= applied.answer.applied() && matches!(pending.op, Op::Delete { .. });
            answers.push(applied.answer);
        }
        if let Some(limit) = sweep {
            let swept = tables
                .sweep(now, limit)
                .map_err(fail("cannot sweep expired records"))?;
            dirty |= swept > 0;
        }
    }
    if dirty {
        txn.commit()
            .map_err(|err| Failure::Commit(Arc::new(err.into())))?;
    } else if let Err(err) = txn.abort() {
        // Nothing was written; the answers hold whatever the abort reports.
        tracing::warn!(error = %err, "aborting a read-only write transaction failed");
    }
    Ok(Outcome { answers, deleted })
}
