//! [`Elections::lead`]: campaign, run the work while leading, and end in the
//! one safe order (stop the work, then release).

use std::{future::Future, pin::Pin, time::Duration};

use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use ttl_storage::Key;

use crate::{Elections, ElectionsError, EndReason, Leadership};

/// What the work run by [`Elections::lead`] gets: the fencing token, the
/// cancellation token that fires when leadership ends, and a tracked spawn.
///
/// It cannot release or hand over the leadership: [`Elections::lead`] does
/// that once the work has returned, so the order (work stopped, then
/// release) is the only one possible.
#[derive(Clone)]
pub struct LeaderContext {
    leadership: Leadership,
}

impl LeaderContext {
    /// The election key.
    pub fn key(&self) -> &Key {
        self.leadership.key()
    }

    /// This leader's value.
    pub fn value(&self) -> &[u8] {
        self.leadership.value()
    }

    /// The fencing token: pass it with every write to a guarded resource
    /// (see [`Leadership::fencing_token`]).
    pub fn fencing_token(&self) -> u64 {
        self.leadership.fencing_token()
    }

    /// The leadership duration.
    pub fn duration(&self) -> Duration {
        self.leadership.duration()
    }

    /// Fires when leadership ends: stop the work and return.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.leadership.cancellation_token()
    }

    /// Completes when leadership ends (the token fired), with the reason.
    pub async fn cancelled(&self) -> EndReason {
        self.leadership.ended().await
    }

    /// True until leadership ends.
    pub fn is_active(&self) -> bool {
        self.leadership.is_active()
    }

    /// Spawns a task that is part of the work: `lead` waits for it (bounded
    /// by the killer deadline) before releasing. See [`Leadership::spawn`].
    pub fn spawn<F>(&self, task: F) -> JoinHandle<F::Output>
    where
        F: Future + Send + 'static,
        F::Output: Send + 'static,
    {
        self.leadership.spawn(task)
    }
}

impl std::fmt::Debug for LeaderContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaderContext")
            .field("leadership", &self.leadership)
            .finish()
    }
}

/// Why [`Elections::lead`] did not return the work's output.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum LeadError {
    /// Leadership ended before the work returned; the work was cancelled,
    /// waited for (up to the killer deadline) and the leadership released.
    #[error("leadership ended before the work returned: {reason}")]
    Ended {
        /// Why it ended.
        reason: EndReason,
        /// True when the work had not returned by the killer deadline (the
        /// killer fired; with the production killer the process is gone
        /// before this is returned) and was dropped.
        overran: bool,
    },
    /// Campaigning failed (see [`Elections::campaign`]).
    #[error(transparent)]
    Elections(#[from] ElectionsError),
}

/// Releases a leadership whose `lead` future was dropped part-way (the work
/// future is dropped with it, so it has stopped, apart from its tracked
/// tasks, which the release waits for).
struct ReleaseOnDrop(Option<Leadership>);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        if let Some(leadership) = self.0.take() {
            match tokio::runtime::Handle::try_current() {
                Ok(runtime) => {
                    runtime.spawn(leadership.release());
                }
                Err(_) => tracing::warn!(
                    key = %leadership.key(),
                    "lead() dropped outside a runtime; the leadership stays held until cleanup"
                ),
            }
        }
    }
}

impl Elections {
    /// Campaigns for `key` until this instance leads (see
    /// [`campaign`](Self::campaign)), runs `work` while leading, and ends in
    /// the only safe order:
    ///
    /// - the work returns: the leadership is released and its output returned;
    /// - the leadership ends first (lost, or released by
    ///   [`cleanup`](Self::cleanup)): the work's cancellation token fires,
    ///   `lead` waits for the work (and its [`LeaderContext::spawn`]ed
    ///   tasks) to return, **bounded by the killer deadline**, then releases
    ///   (disarming the killer) and returns [`LeadError::Ended`] with the
    ///   typed reason. Work that has not returned by the deadline is dropped
    ///   after the killer fired.
    ///
    /// Dropping the `lead` future drops the work and releases the leadership
    /// in the background.
    ///
    /// ```
    /// use std::time::Duration;
    /// use elections::{Elections, RecordingKiller};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), elections::LeadError> {
    /// let storage = storage_mem::MemStorage::new();
    /// let elections = Elections::with_killer(storage, RecordingKiller::new());
    /// let key = ttl_storage::Key::new("cron-leader").map_err(elections::ElectionsError::from)?;
    ///
    /// let runs = elections
    ///     .lead(&key, "10.0.0.7", Duration::from_secs(20), |leader| async move {
    ///         let mut runs = 0;
    ///         // Pass leader.fencing_token() with every write the work does.
    ///         while runs < 3 && leader.is_active() {
    ///             runs += 1;
    ///             tokio::select! {
    ///                 _ = leader.cancelled() => break,
    ///                 () = tokio::time::sleep(Duration::from_secs(60)) => {}
    ///             }
    ///         }
    ///         runs
    ///     })
    ///     .await?;
    /// assert_eq!(runs, 3);
    /// assert!(elections.held_keys().is_empty(), "released once the work returned");
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`LeadError::Ended`] when leadership ended before the work returned;
    /// [`LeadError::Elections`] when campaigning failed.
    pub async fn lead<F, Fut, T>(
        &self,
        key: &Key,
        value: impl AsRef<[u8]>,
        duration: Duration,
        work: F,
    ) -> Result<T, LeadError>
    where
        F: FnOnce(LeaderContext) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.campaign(key, value, duration).await?;
        let mut guard = ReleaseOnDrop(Some(leadership.clone()));
        // The work counts as tracked work while it runs, so any release of
        // this leadership (ours below, or `cleanup`'s) waits for it.
        let tracked = leadership.work.token();
        let context = LeaderContext {
            leadership: leadership.clone(),
        };
        let mut work = Box::pin(work(context));
        let first = tokio::select! {
            biased;
            output = &mut work => Ok(output),
            reason = leadership.ended() => Err(reason),
        };
        let result = match first {
            Ok(output) => Ok(output),
            Err(reason) => {
                let overran = wait_bounded(&leadership, work.as_mut()).await;
                Err(LeadError::Ended { reason, overran })
            }
        };
        drop(work);
        drop(tracked);
        guard.0 = None;
        leadership.release().await;
        result
    }
}

/// After the end of `leadership`: waits for `work` to return, at most until
/// the killer deadline (which still moves while renewal goes on, during a
/// release that waits for this work). True when the deadline passed first.
async fn wait_bounded<Fut: Future>(leadership: &Leadership, mut work: Pin<&mut Fut>) -> bool {
    loop {
        let Some(deadline) = leadership.killer.deadline() else {
            // Disarmed: only a release that saw every tracked task end
            // disarms, and this work is tracked, so this cannot happen
            // before it returns; wait for it all the same.
            work.await;
            return false;
        };
        match tokio::time::timeout_at(deadline, work.as_mut()).await {
            Ok(_) => return false,
            Err(_) if leadership.killer.deadline() == Some(deadline) => {
                tracing::error!(
                    key = %leadership.key(),
                    "the work did not stop by the killer deadline; dropping it"
                );
                return true;
            }
            // A renewal moved the deadline: keep waiting.
            Err(_) => {}
        }
    }
}
