//! What `/healthz` answers: the role this vvm-host plays (leader or
//! standby), the key, fencing token and lease expiry while leading, and
//! whether it is healthy (503 once shutting down, after a leadership loss
//! or a failure, and while its store fails).

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use tokio::{sync::watch, time::Instant};
use ttl_storage::{DynTtlStorage, Key};
use vvm_orch::VvmStatus;

use crate::observed_storage::{Observed, Observer, Outcome, Started};

/// The state `/healthz` reports, shared by the host, the storage wrapper
/// and the HTTP handler.
pub(crate) struct Health {
    lease: Duration,
    /// The VVM's status, once launched.
    status: OnceLock<watch::Receiver<VvmStatus>>,
    state: Mutex<State>,
}

#[derive(Default)]
struct State {
    shutting_down: bool,
    /// The error of the last storage call, if it failed.
    store_error: Option<String>,
    /// Start of the last successful write (insert or swap) per key.
    last_write: HashMap<Key, Instant>,
}

/// The JSON body of `/healthz`.
#[derive(Debug, serde::Serialize)]
pub(crate) struct Report {
    /// `ok`, or why not: `starting`, `shutting_down`, `leadership_lost`,
    /// `failed`, `store_lost`.
    pub(crate) status: &'static str,
    /// `leader`, `standby` or `none`.
    pub(crate) role: &'static str,
    pub(crate) key: Option<String>,
    pub(crate) key_index: Option<u32>,
    pub(crate) fencing_token: Option<u64>,
    pub(crate) lease_duration_ms: u64,
    /// Time left on the lease, counted from the start of the last
    /// successful write (the killer acts at 80 % of the lease).
    pub(crate) expires_in_ms: Option<u64>,
    /// The last storage error, while the store fails.
    pub(crate) store_error: Option<String>,
}

impl Report {
    /// True when the answer is 200.
    pub(crate) fn healthy(&self) -> bool {
        self.status == "ok"
    }
}

impl Health {
    /// Health of a host whose leases last `lease`.
    pub(crate) fn new(lease: Duration) -> Arc<Self> {
        Arc::new(Health {
            lease,
            status: OnceLock::new(),
            state: Mutex::new(State::default()),
        })
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Follows the launched VVM's status.
    pub(crate) fn follow(&self, status: watch::Receiver<VvmStatus>) {
        let _ = self.status.set(status);
    }

    /// Shutdown has begun: unhealthy from now on.
    pub(crate) fn shutting_down(&self) {
        self.lock().shutting_down = true;
    }

    fn stored(&self, result: Result<Option<(&Key, Instant)>, String>) {
        let mut state = self.lock();
        match result {
            Ok(write) => {
                state.store_error = None;
                if let Some((key, started)) = write {
                    state.last_write.insert(key.clone(), started);
                }
            }
            Err(error) => state.store_error = Some(error),
        }
    }

    /// The report for `/healthz` now.
    pub(crate) fn report(&self) -> Report {
        let status = self.status.get().map(|rx| rx.borrow().clone());
        let state = self.lock();
        let (role, leader) = match &status {
            Some(VvmStatus::Leading(info)) => ("leader", Some(info)),
            Some(VvmStatus::Acquiring) => ("standby", None),
            _ => ("none", None),
        };
        let verdict = match &status {
            _ if state.shutting_down => "shutting_down",
            None => "starting",
            Some(VvmStatus::ShuttingDown | VvmStatus::ShutDown) => "shutting_down",
            Some(VvmStatus::LeadershipLost(_)) => "leadership_lost",
            Some(VvmStatus::Leading(_) | VvmStatus::Acquiring) if state.store_error.is_some() => {
                "store_lost"
            }
            Some(VvmStatus::Leading(_) | VvmStatus::Acquiring) => "ok",
            Some(_) => "failed",
        };
        let expires_in_ms =
            leader
                .and_then(|info| state.last_write.get(&info.key))
                .map(|started| {
                    let expiry = *started + self.lease;
                    millis(expiry.saturating_duration_since(Instant::now()))
                });
        Report {
            status: verdict,
            role,
            key: leader.map(|info| info.key.to_string()),
            key_index: leader.map(|info| info.key_index),
            fencing_token: leader.map(|info| info.fencing_token),
            lease_duration_ms: millis(self.lease),
            expires_in_ms,
            store_error: state.store_error.clone(),
        }
    }
}

fn millis(duration: Duration) -> u64 {
    u64::try_from(duration.as_millis()).unwrap_or(u64::MAX)
}

/// Tells [`Health`] how each storage call went.
pub(crate) struct HealthStorage(Arc<Health>);

impl HealthStorage {
    /// `inner`, reporting to `health`.
    pub(crate) fn wrap(inner: DynTtlStorage, health: Arc<Health>) -> DynTtlStorage {
        Observed::wrap(inner, HealthStorage(health))
    }
}

#[async_trait]
impl Observer for HealthStorage {
    async fn after(&self, key: &Key, started: Started, outcome: Outcome<'_>) {
        self.0.stored(match outcome {
            Outcome::Wrote => Ok(Some((key, started.instant))),
            Outcome::Answered => Ok(None),
            Outcome::Failed(err) => Err(err.to_string()),
        });
    }
}
