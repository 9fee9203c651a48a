//! Problems: the one error path of a running VVM, and the signal that fires
//! when the first problem is reported.

use std::{
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use elections::{ElectionsError, EndReason};
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use ttl_storage::{BoxError, Key};

/// Why a VVM cannot go on: the first one reported is kept and returned by
/// [`crate::LaunchedVvm::shutdown`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum VvmProblem {
    /// No key of `1..=cluster_size` could be acquired within the acquisition duration.
    #[error(
        "could not acquire leadership of any of {cluster_size} key(s) within {duration:?}{}",
        last_error.as_ref().map(|e| format!(" (last error: {e})")).unwrap_or_default()
    )]
    LeadershipAcquisition {
        /// Keys tried in each round.
        cluster_size: u32,
        /// The acquisition duration that ran out.
        duration: Duration,
        /// The last storage error met while trying, if any.
        last_error: Option<String>,
    },
    /// Leadership was lost while the services ran (the elections killer is
    /// armed until the VVM shuts down and releases the key).
    #[error("leadership of key {key} {reason}")]
    LeadershipLost {
        /// The key that was held.
        key: Key,
        /// How it ended.
        reason: EndReason,
    },
    /// Elections refused an acquisition for a reason retrying cannot fix.
    #[error("elections failed: {0}")]
    Elections(#[source] ElectionsError),
    /// Leaders started with another cluster size are running (see
    /// [`crate::VvmConfig::cluster_size`]): this VVM gave its key back
    /// without starting the services.
    #[error(
        "cluster size {ours} disagrees with the leaders running ({}): every node of one cluster must be started with the same cluster size",
        theirs.map_or_else(|| "an unreadable size record".to_owned(), |n| format!("started with {n}"))
    )]
    ClusterSizeMismatch {
        /// This VVM's cluster size.
        ours: u32,
        /// The size the running leaders claimed (`None`: unreadable).
        theirs: Option<u32>,
    },
    /// The service pipeline returned an error.
    #[error("service pipeline failed: {0}")]
    Service(#[source] BoxError),
    /// The service pipeline panicked.
    #[error("service pipeline panicked: {0}")]
    ServicePanicked(String),
    /// The service pipeline returned `Ok` before it was asked to stop: the
    /// VVM leads but has nothing left to run.
    #[error("service pipeline finished before shutdown was requested")]
    ServicesFinished,
}

/// Keeps the first problem and fires the problem signal once.
#[derive(Debug, Default)]
pub(crate) struct ProblemSlot {
    first: Mutex<Option<VvmProblem>>,
    signal: CancellationToken,
}

impl ProblemSlot {
    /// Reports `problem`: the first one is kept and fires the signal; later
    /// ones are logged and dropped. Never blocks beyond a short lock.
    pub(crate) fn update(&self, problem: VvmProblem) {
        let mut first = self.first.lock().unwrap_or_else(PoisonError::into_inner);
        // The signal, not the slot, says whether a problem was reported: the
        // slot is emptied by `take`, and later reports must still be dropped.
        if self.signal.is_cancelled() {
            tracing::warn!(problem = %problem, "VVM problem reported after the first one; ignored");
            return;
        }
        // The first problem is returned to the caller (`problem().raised()`,
        // `shutdown`), which decides what it means and says it once: the
        // library does not log it at ERROR as well (a command's own exit,
        // a hand-over and a cron-style job that finished are not errors).
        tracing::debug!(problem = %problem, "VVM problem reported");
        *first = Some(problem);
        // Cancelling only wakes waiters; it is cheap and never blocks.
        self.signal.cancel();
    }

    /// Takes the first problem, if any.
    pub(crate) fn take(&self) -> Option<VvmProblem> {
        self.first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .take()
    }

    fn describe(&self) -> Option<String> {
        self.first
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .as_ref()
            .map(ToString::to_string)
    }
}

/// The problem signal returned by [`crate::Vvm::launch`]: fires once, when
/// the first problem is reported. The host waits for it (and for its own
/// signals), then calls [`crate::LaunchedVvm::shutdown`].
///
/// Cheap to clone; outlives the VVM.
#[derive(Debug, Clone)]
pub struct ProblemSignal {
    slot: Arc<ProblemSlot>,
}

impl ProblemSignal {
    pub(crate) fn new(slot: Arc<ProblemSlot>) -> Self {
        ProblemSignal { slot }
    }

    /// Completes once a problem has been reported.
    pub fn raised(&self) -> WaitForCancellationFuture<'_> {
        self.slot.signal.cancelled()
    }

    /// True once a problem has been reported.
    pub fn is_raised(&self) -> bool {
        self.slot.signal.is_cancelled()
    }

    /// The signal as a token (for `select!` loops or child tokens).
    pub fn token(&self) -> CancellationToken {
        self.slot.signal.clone()
    }

    /// The first problem, as text, until [`crate::LaunchedVvm::shutdown`] takes it.
    pub fn describe(&self) -> Option<String> {
        self.slot.describe()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn first_problem_wins_and_fires_once() {
        let slot = Arc::new(ProblemSlot::default());
        let signal = ProblemSignal::new(slot.clone());
        assert!(!signal.is_raised());
        let tasks: Vec<_> = (0..16)
            .map(|i| {
                let slot = slot.clone();
                tokio::spawn(async move {
                    slot.update(VvmProblem::Service(format!("error {i}").into()));
                })
            })
            .collect();
        for task in tasks {
            task.await.unwrap();
        }
        signal.raised().await;
        let described = signal.describe().unwrap();
        let first = slot.take().unwrap();
        assert_eq!(first.to_string(), described);
        // Exactly one was kept, and reports after `take` are dropped too.
        assert!(slot.take().is_none());
        slot.update(VvmProblem::ServicesFinished);
        assert!(slot.take().is_none());
        assert!(signal.is_raised());
    }

    #[test]
    fn messages_are_clear() {
        let problem = VvmProblem::LeadershipAcquisition {
            cluster_size: 3,
            duration: Duration::from_secs(120),
            last_error: Some("boom".into()),
        };
        assert_eq!(
            problem.to_string(),
            "could not acquire leadership of any of 3 key(s) within 120s (last error: boom)"
        );
    }
}
