//! Pod-side cancellation: a registry of in-flight calls by request id.
//!
//! The coordinator attaches a request id to every forwarded call and, when
//! its client disconnects or times out, sends a cancel message for that id.
//! The pod registers each call here; [`CancelRegistry::cancel`] fires the
//! call's [`CancellationToken`], and [`CancelRegistry::run`] drops the
//! operation's future when that happens.

use std::collections::HashMap;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use crate::ids::RequestId;

/// How long a cancel for a not-yet-registered id is remembered, so a call
/// whose cancel overtakes it is cancelled on arrival.
const EARLY_CANCEL_TTL: Duration = Duration::from_secs(30);
/// At most this many early cancels are remembered.
const EARLY_CANCEL_CAP: usize = 10_000;

/// The operation was cancelled before it finished.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
#[error("the call was cancelled")]
pub struct Cancelled;

#[derive(Default)]
struct State {
    calls: HashMap<RequestId, (u64, CancellationToken)>,
    early: HashMap<RequestId, Instant>,
}

/// The in-flight calls of one pod. Cheap to clone; clones share state.
#[derive(Clone, Default)]
pub struct CancelRegistry {
    state: Arc<Mutex<State>>,
    generation: Arc<AtomicU64>,
}

impl std::fmt::Debug for CancelRegistry {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CancelRegistry")
            .field("in_flight", &self.len())
            .finish()
    }
}

/// A registered call; dropping it unregisters the call.
#[derive(Debug)]
pub struct InFlight {
    registry: CancelRegistry,
    id: RequestId,
    generation: u64,
    token: CancellationToken,
}

impl InFlight {
    /// The call's token, cancelled by a cancel message for its id.
    pub fn token(&self) -> &CancellationToken {
        &self.token
    }

    /// The call's request id.
    pub fn id(&self) -> &RequestId {
        &self.id
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        let mut st = self.registry.lock();
        if st.calls.get(&self.id).map(|(g, _)| *g) == Some(self.generation) {
            st.calls.remove(&self.id);
        }
    }
}

impl CancelRegistry {
    /// An empty registry.
    pub fn new() -> Self {
        Self::default()
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Registers a call. A second registration of the same id replaces the
    /// first for cancel lookups. If a cancel for `id` arrived in the last
    /// 30 s, the returned token is already cancelled.
    pub fn register(&self, id: RequestId) -> InFlight {
        let generation = self.generation.fetch_add(1, Ordering::Relaxed);
        let token = CancellationToken::new();
        let mut st = self.lock();
        if let Some(at) = st.early.remove(&id)
            && at.elapsed() < EARLY_CANCEL_TTL
        {
            token.cancel();
        }
        st.calls.insert(id.clone(), (generation, token.clone()));
        drop(st);
        InFlight {
            registry: self.clone(),
            id,
            generation,
            token,
        }
    }

    /// Cancels the call registered under `id`; `false` if none is in flight
    /// (the cancel is then remembered briefly in case the call is late).
    pub fn cancel(&self, id: &RequestId) -> bool {
        let mut st = self.lock();
        if let Some((_, token)) = st.calls.get(id) {
            token.cancel();
            return true;
        }
        let now = Instant::now();
        if st.early.len() >= EARLY_CANCEL_CAP {
            st.early
                .retain(|_, at| now.duration_since(*at) < EARLY_CANCEL_TTL);
            if st.early.len() >= EARLY_CANCEL_CAP {
                st.early.clear();
            }
        }
        st.early.insert(id.clone(), now);
        false
    }

    /// Runs `operation` as call `id`; a cancel for `id` drops the future and
    /// returns [`Cancelled`].
    pub async fn run<F: Future>(
        &self,
        id: RequestId,
        operation: F,
    ) -> Result<F::Output, Cancelled> {
        let call = self.register(id);
        tokio::select! {
            biased;
            _ = call.token().cancelled() => Err(Cancelled),
            out = operation => Ok(out),
        }
    }

    /// How many calls are in flight.
    pub fn len(&self) -> usize {
        self.lock().calls.len()
    }

    /// Whether no call is in flight.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn cancel_aborts_a_running_operation() {
        let reg = CancelRegistry::new();
        let id = RequestId::generate();
        let (tx, rx) = tokio::sync::oneshot::channel::<()>();
        let task = tokio::spawn({
            let reg = reg.clone();
            let id = id.clone();
            async move {
                reg.run(id, async move {
                    let _keep = tx;
                    std::future::pending::<()>().await
                })
                .await
            }
        });
        while reg.is_empty() {
            tokio::task::yield_now().await;
        }
        assert!(reg.cancel(&id));
        assert_eq!(task.await.unwrap(), Err(Cancelled));
        assert!(rx.await.is_err(), "the operation's future was dropped");
        assert!(reg.is_empty());
    }

    #[tokio::test]
    async fn finished_calls_unregister_and_unknown_ids_report_false() {
        let reg = CancelRegistry::new();
        let id = RequestId::generate();
        assert_eq!(reg.run(id.clone(), async { 7 }).await, Ok(7));
        assert!(reg.is_empty());
        assert!(!reg.cancel(&RequestId::generate()));
    }

    #[tokio::test]
    async fn an_early_cancel_cancels_the_late_call() {
        let reg = CancelRegistry::new();
        let id = RequestId::generate();
        assert!(!reg.cancel(&id));
        let call = reg.register(id);
        assert!(call.token().is_cancelled());
    }
}
