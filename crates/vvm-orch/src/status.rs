//! What a launched VVM is doing, for hosts, tests and dashboards.

use elections::Elections;
use tokio_util::task::TaskTracker;
use ttl_storage::Key;

/// The leadership a VVM runs its services under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderInfo {
    /// The key held.
    pub key: Key,
    /// Its index in `1..=cluster_size`.
    pub key_index: u32,
    /// The fencing token of this leadership.
    pub fencing_token: u64,
}

/// The phase of a launched VVM.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum VvmStatus {
    /// The Launcher is trying to acquire a key.
    Acquiring,
    /// Leadership acquired; the monitor and the services run.
    Leading(LeaderInfo),
    /// Leadership was lost; the services were told to stop.
    LeadershipLost(LeaderInfo),
    /// The acquisition duration ran out without leadership.
    AcquisitionFailed,
    /// The Launcher stopped after an error (see the problem).
    Failed,
    /// Shutdown has begun.
    ShuttingDown,
    /// Shutdown has completed: every task has ended and leadership was released.
    ShutDown,
}

/// Counts the tasks a VVM started (Launcher, LeadershipMonitor,
/// ServicePipeline, and the elections' renewal and killer tasks), so a
/// test can prove none survives [`crate::LaunchedVvm::shutdown`].
#[derive(Debug, Clone)]
pub struct TaskProbe {
    pub(crate) trackers: [TaskTracker; 3],
    pub(crate) elections: Elections,
}

impl TaskProbe {
    /// Tasks still running.
    pub fn running(&self) -> usize {
        self.trackers.iter().map(TaskTracker::len).sum::<usize>()
            + self.elections.background_tasks()
    }
}
