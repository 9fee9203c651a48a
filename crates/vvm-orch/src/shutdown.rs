//! The shutdown order: the state a launched VVM shares with its tasks, and
//! the sequence that stops the services first and releases leadership after.

use std::sync::{
    Arc, Mutex, MutexGuard, PoisonError,
    atomic::{AtomicBool, Ordering},
};

use elections::Elections;
use tokio::sync::watch;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use ttl_storage::DynTtlStorage;

use crate::{VvmConfig, VvmProblem, VvmStatus, problem::ProblemSlot};

pub(crate) struct Shared {
    pub(crate) config: VvmConfig,
    /// The leadership value: the address plus a per-process unique suffix.
    pub(crate) value: String,
    pub(crate) storage: DynTtlStorage,
    pub(crate) elections: Elections,
    pub(crate) problems: Arc<ProblemSlot>,
    /// Shutdown has begun (the design's vvmShutCtx).
    pub(crate) vvm_shut: CancellationToken,
    /// The services must stop: shutdown or leadership loss (servicesShutCtx).
    pub(crate) services_shut: CancellationToken,
    /// The monitor must stop (monitorShutCtx).
    pub(crate) monitor_shut: CancellationToken,
    pub(crate) launcher_tasks: TaskTracker,
    pub(crate) monitor_tasks: TaskTracker,
    pub(crate) service_tasks: TaskTracker,
    /// Serialises "spawn the monitor and services" with "shutdown begins".
    gate: Mutex<()>,
    pub(crate) status: watch::Sender<VvmStatus>,
    /// The shutdown sequence ran to its end.
    completed: AtomicBool,
}

impl Shared {
    pub(crate) fn new(
        config: VvmConfig,
        value: String,
        storage: DynTtlStorage,
        elections: Elections,
    ) -> Self {
        Shared {
            config,
            value,
            storage,
            elections,
            problems: Arc::default(),
            vvm_shut: CancellationToken::new(),
            services_shut: CancellationToken::new(),
            monitor_shut: CancellationToken::new(),
            launcher_tasks: TaskTracker::new(),
            monitor_tasks: TaskTracker::new(),
            service_tasks: TaskTracker::new(),
            gate: Mutex::new(()),
            status: watch::Sender::new(VvmStatus::Acquiring),
            completed: AtomicBool::new(false),
        }
    }

    pub(crate) fn lock_gate(&self) -> MutexGuard<'_, ()> {
        self.gate.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The Launcher gives up with `problem`.
    pub(crate) fn fail(&self, problem: VvmProblem) {
        self.status.send_replace(VvmStatus::Failed);
        self.problems.update(problem);
    }

    /// Step 1 of shutdown, synchronous so `Drop` can run it too: signal
    /// shutdown and tell the services to stop.
    pub(crate) fn begin_shutdown(&self) {
        {
            let _gate = self.lock_gate();
            self.vvm_shut.cancel();
        }
        self.status.send_replace(VvmStatus::ShuttingDown);
        self.services_shut.cancel();
    }

    /// True once [`Self::shut_down`] has run to its end.
    pub(crate) fn is_shut_down(&self) -> bool {
        self.completed.load(Ordering::Acquire)
    }

    /// The shutdown sequence; see the crate documentation for the order and
    /// why. Idempotent: running it again (after an interrupted run) finishes
    /// what is left.
    pub(crate) async fn shut_down(&self) -> Option<VvmProblem> {
        // 1. Signal shutdown: the Launcher stops acquiring, nothing new is spawned.
        self.begin_shutdown();
        // 2. Stop the services and wait for them. The monitor still watches,
        //    so a loss during a slow stop is still reported.
        self.service_tasks.close();
        self.service_tasks.wait().await;
        tracing::debug!("shutdown: services stopped");
        // 3. Stop the monitor.
        self.monitor_shut.cancel();
        self.monitor_tasks.close();
        self.monitor_tasks.wait().await;
        tracing::debug!("shutdown: monitor stopped");
        // 4. Clean up elections: only now, with the services stopped, is the
        //    leadership released (record deleted, killer disarmed).
        self.elections.cleanup().await;
        tracing::debug!("shutdown: elections cleaned up");
        // 5. Wait for the Launcher (it may be withdrawing an interrupted acquisition).
        self.launcher_tasks.close();
        self.launcher_tasks.wait().await;
        // 6. Mark shut down.
        self.completed.store(true, Ordering::Release);
        self.status.send_replace(VvmStatus::ShutDown);
        tracing::debug!("VVM shut down");
        self.problems.take()
    }
}
