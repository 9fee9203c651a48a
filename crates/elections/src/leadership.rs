//! The handle a leader holds.

use std::{fmt, sync::Arc, time::Duration};

use tokio::task::JoinHandle;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use ttl_storage::Key;

use crate::end::{EndReason, EndSignal};

/// A held leadership: the key, the fencing token, and a signal that fires
/// when leadership is lost or released.
///
/// Cheap to clone. Dropping a handle changes nothing: leadership ends only
/// by loss, [`Leadership::release`], [`crate::Elections::release_leadership`]
/// or [`crate::Elections::cleanup`]. A handle keeps its [`crate::Elections`]
/// alive, so dropping the last `Elections` clone while a handle exists
/// changes nothing either; see [`crate::Elections`] for what happens when
/// both are gone.
#[derive(Clone)]
pub struct Leadership {
    pub(crate) key: Key,
    pub(crate) record: Arc<[u8]>,
    pub(crate) fencing_token: u64,
    pub(crate) duration: Duration,
    pub(crate) end: EndSignal,
    pub(crate) work: TaskTracker,
    pub(crate) killer: Arc<crate::killer::KillerTimer>,
    pub(crate) owner: crate::Elections,
}

impl Leadership {
    /// Releases this leadership, consuming the handle: fires the end signal
    /// ([`EndReason::Released`]), waits for the work spawned with
    /// [`Leadership::spawn`], stops renewal, disarms the killer, then
    /// deletes the record if it still holds this leadership's value (best
    /// effort; otherwise it expires by itself). See
    /// [`crate::Elections::release_leadership`].
    ///
    /// Work not spawned with [`Leadership::spawn`] must have stopped before
    /// this call: that is what makes it safe to let the next leader in
    /// ([`crate::Elections::lead`] does it for you). It works after a loss too
    /// (that is how the owner disarms the killer), and is a no-op if this
    /// leadership was already released, even if the same instance has
    /// since acquired the key again.
    ///
    /// ```
    /// # use std::time::Duration;
    /// # use elections::{Elections, RecordingKiller};
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), elections::ElectionsError> {
    /// # let storage = storage_mem::MemStorage::new();
    /// let elections = Elections::with_killer(storage, RecordingKiller::new());
    /// let key = ttl_storage::Key::new("nightly-report")?;
    /// if let Some(leadership) = elections.acquire_leadership(&key, "node-1", Duration::from_secs(20)).await? {
    ///     // ... the work, stopped when `leadership.ended()` fires ...
    ///     leadership.release().await;
    /// }
    /// assert!(elections.held_keys().is_empty());
    /// # Ok(()) }
    /// ```
    pub async fn release(self) {
        self.owner
            .release_matching(&self.key, Some(&self.record))
            .await;
    }

    /// Spawns `task` as work done under this leadership. A release (or a
    /// hand-over) fires the end signal, then **waits for every such task to
    /// end** before it disarms the killer and lets the next leader in; after
    /// a loss, the killer bounds that wait. So a task that stops when
    /// [`Leadership::cancellation_token`] fires can never outlive the
    /// leadership, and one that does not stop in time is ended by the
    /// killer. A task started with a plain `tokio::spawn` is outside this
    /// guarantee.
    ///
    /// Spawning after the release has begun still runs the task, and the
    /// release still waits for it if it has not finished waiting.
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.work.spawn(task)
    }

    /// The election key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The value this leader gave to `acquire_leadership`.
    pub fn value(&self) -> &[u8] {
        crate::record::leader_value(&self.record)
    }

    /// The exact bytes stored in the record: the value and this
    /// leadership's unique nonce (see [`crate::record`]).
    pub fn record_value(&self) -> &[u8] {
        &self.record
    }

    /// The fencing token: strictly greater than every token issued before
    /// for this key, by any process, even across a store wiped, re-created
    /// or restored from a backup (tokens are at least the wall clock in
    /// nanoseconds, see [`crate::fencing`]); below `i64::MAX`. Pass it with
    /// every write to a guarded resource, which must reject tokens lower
    /// than the highest it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The leadership duration (the record's TTL).
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// A token cancelled when leadership is lost or released. Child tokens
    /// of it are a convenient shutdown signal for work done as leader.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.end.token.clone()
    }

    /// Completes when leadership ends, with the reason.
    pub async fn ended(&self) -> EndReason {
        self.end.token.cancelled().await;
        self.end
            .reason
            .get()
            .cloned()
            // The reason is always set before the token fires.
            .unwrap_or(EndReason::Expired)
    }

    /// True until leadership is lost or released.
    pub fn is_active(&self) -> bool {
        !self.end.token.is_cancelled()
    }

    /// Why leadership ended, once it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        if self.is_active() {
            return None;
        }
        self.end.reason.get().cloned()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .field("duration", &self.duration)
            .field("end_reason", &self.end_reason())
            .finish()
    }
}
