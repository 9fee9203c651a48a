//! The typestate VVM: [`Vvm`] (provided) -> [`LaunchedVvm`] -> shut down.

use std::{fmt, sync::Arc};

use elections::{Elections, Killer};

use tokio::sync::watch;
use tracing::Instrument;
use ttl_storage::{DynTtlStorage, TtlStorage};

use crate::{
    ConfigError, LeaderInfo, ProblemSignal, ServicePipeline, TaskProbe, VvmConfig, VvmProblem,
    VvmStatus, launcher, shutdown::Shared,
};

/// A provided VVM: wired, nothing launched. [`launch`](Self::launch) consumes it.
///
/// ```compile_fail
/// # use vvm_orch::{Vvm, VvmConfig, service_fn, ServiceContext};
/// # async fn demo(vvm: Vvm<impl vvm_orch::ServicePipeline>) {
/// let (launched, _problem) = vvm.launch();
/// vvm.launch(); // error: `vvm` was moved by the first launch
/// # }
/// ```
///
/// ```compile_fail
/// # use vvm_orch::{Vvm, VvmConfig, service_fn, ServiceContext};
/// # async fn demo(vvm: Vvm<impl vvm_orch::ServicePipeline>) {
/// vvm.shutdown().await; // error: only a launched VVM can be shut down
/// # }
/// ```
pub struct Vvm<P> {
    config: VvmConfig,
    value: String,
    storage: DynTtlStorage,
    elections: Elections,
    pipeline: P,
}

impl<P: ServicePipeline> Vvm<P> {
    /// Wires a VVM: validates `config`, makes this VVM's unique leadership
    /// value, and sets up elections over `storage` with the production
    /// killer (which exits the process if a lost leadership is not released
    /// in time). Launches nothing.
    ///
    /// # Errors
    ///
    /// An invalid configuration.
    pub fn provide(
        config: VvmConfig,
        storage: impl TtlStorage + 'static,
        pipeline: P,
    ) -> Result<Self, ConfigError> {
        config.validate()?;
        let storage: DynTtlStorage = Arc::new(storage);
        let value = unique_value(&config.address);
        let elections = Elections::new(storage.clone());
        Ok(Vvm {
            config,
            value,
            storage,
            elections,
            pipeline,
        })
    }

    /// Replaces the elections killer (tests use
    /// [`elections::RecordingKiller`]; production keeps [`elections::ProcessKiller`]).
    pub fn with_killer(mut self, killer: Arc<dyn Killer>) -> Self {
        self.elections = Elections::with_killer(self.storage.clone(), killer);
        self
    }

    /// The validated configuration.
    pub fn config(&self) -> &VvmConfig {
        &self.config
    }

    /// The value this VVM writes to the leadership record.
    pub fn value(&self) -> &str {
        &self.value
    }

    /// Launches the VVM: starts the Launcher in the background and returns
    /// at once with the launched VVM and its problem signal.
    ///
    /// # Panics
    ///
    /// Outside a Tokio runtime, like [`tokio::spawn`].
    pub fn launch(self) -> (LaunchedVvm, ProblemSignal) {
        let shared = Arc::new(Shared::new(
            self.config,
            self.value,
            self.storage,
            self.elections,
        ));
        let signal = ProblemSignal::new(shared.problems.clone());
        let span = tracing::info_span!("vvm", value = %shared.value);
        shared
            .launcher_tasks
            .spawn(launcher::run(shared.clone(), self.pipeline).instrument(span));
        (LaunchedVvm { shared }, signal)
    }
}

impl<P> fmt::Debug for Vvm<P> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Vvm")
            .field("config", &self.config)
            .field("value", &self.value)
            .finish_non_exhaustive()
    }
}

/// A launched VVM. [`shutdown`](Self::shutdown) consumes it.
///
/// Dropping it without `shutdown` (or dropping the `shutdown` future before
/// it completes) runs the shutdown sequence in the background (if a Tokio
/// runtime is still running) and logs a warning: the services are told to
/// stop at once, and leadership is released once they have.
pub struct LaunchedVvm {
    shared: Arc<Shared>,
}

impl LaunchedVvm {
    fn shared(&self) -> &Shared {
        &self.shared
    }

    /// The value this VVM writes to the leadership record.
    pub fn value(&self) -> &str {
        &self.shared().value
    }

    /// The configuration.
    pub fn config(&self) -> &VvmConfig {
        &self.shared().config
    }

    /// What the VVM is doing now.
    pub fn status(&self) -> VvmStatus {
        self.shared().status.borrow().clone()
    }

    /// A receiver of every status change (it sees [`VvmStatus::ShutDown`] too).
    pub fn status_watch(&self) -> watch::Receiver<VvmStatus> {
        self.shared().status.subscribe()
    }

    /// The leadership the services run under, while leading.
    pub fn leader_info(&self) -> Option<LeaderInfo> {
        match &*self.shared().status.borrow() {
            VvmStatus::Leading(info) => Some(info.clone()),
            _ => None,
        }
    }

    /// Waits until the Launcher has acquired leadership (`Some`) or given
    /// up, failed, or been shut down (`None`).
    pub async fn wait_for_leadership(&self) -> Option<LeaderInfo> {
        let mut rx = self.status_watch();
        let status = rx
            .wait_for(|s| !matches!(s, VvmStatus::Acquiring))
            .await
            .ok()?;
        match &*status {
            VvmStatus::Leading(info) => Some(info.clone()),
            _ => None,
        }
    }

    /// The problem signal (the same one [`Vvm::launch`] returned).
    pub fn problem_signal(&self) -> ProblemSignal {
        ProblemSignal::new(self.shared().problems.clone())
    }

    /// A probe counting this VVM's running tasks.
    pub fn task_probe(&self) -> TaskProbe {
        let shared = self.shared();
        TaskProbe {
            trackers: [
                shared.launcher_tasks.clone(),
                shared.monitor_tasks.clone(),
                shared.service_tasks.clone(),
            ],
            elections: shared.elections.clone(),
        }
    }

    /// Shuts the VVM down and returns the first problem reported, if any.
    ///
    /// The order: signal shutdown; stop the services and wait for them
    /// (the monitor still watching); stop the monitor; clean up elections,
    /// which releases leadership; wait for the Launcher; mark shut down.
    /// When it returns no task of this VVM is left.
    ///
    /// # Errors
    ///
    /// The first [`VvmProblem`] reported while the VVM ran or shut down.
    pub async fn shutdown(self) -> Result<(), VvmProblem> {
        match self.shared.shut_down().await {
            Some(problem) => Err(problem),
            None => Ok(()),
        }
    }
}

impl fmt::Debug for LaunchedVvm {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("LaunchedVvm")
            .field("value", &self.shared.value)
            .field("status", &*self.shared.status.borrow())
            .finish()
    }
}

impl Drop for LaunchedVvm {
    fn drop(&mut self) {
        // `shutdown` ran to its end (it drops `self` when done).
        if self.shared.is_shut_down() {
            return;
        }
        let shared = self.shared.clone();
        tracing::warn!(value = %shared.value, "LaunchedVvm dropped before its shutdown completed; shutting down in the background");
        shared.begin_shutdown();
        if let Ok(handle) = tokio::runtime::Handle::try_current() {
            handle.spawn(async move {
                if let Some(problem) = shared.shut_down().await {
                    tracing::warn!(%problem, "background shutdown of a dropped VVM: problem");
                }
            });
        }
    }
}

/// The address plus the process id and a random suffix: elections resolve
/// outcome-unknown writes by reading the value back, so it must be unique
/// to this VVM even when two VVMs share an address.
fn unique_value(address: &str) -> String {
    format!(
        "{address}#pid{}-{:08x}",
        std::process::id(),
        rand::random::<u32>()
    )
}
