//! The client load of a fleet run: workers calling random destinations
//! through random live coordinators with [`coordinator::client`], as a
//! caller would.

use std::{
    collections::HashMap,
    sync::{
        Arc, RwLock,
        atomic::{AtomicBool, AtomicU64, Ordering},
    },
    time::Duration,
};

use coordinator::{
    DestinationId,
    client::{ClientError, CoordinatorClient},
};
use rand::Rng;
use tokio::task::JoinHandle;

/// The coordinators' base URLs, one per slot (`None` while restarting).
pub(crate) type Coordinators = Arc<RwLock<Vec<Option<String>>>>;

/// What the callers saw.
#[derive(Debug, Default)]
pub struct LoadCounts {
    /// Calls made.
    pub calls: AtomicU64,
    /// Calls answered 200 by a pod.
    pub ok: AtomicU64,
    /// Calls answered 421 `stale_owner` (refused twice: the coordinator
    /// re-resolved once and the second pod refused too).
    pub stale_passed: AtomicU64,
    /// Calls answered with an error by a coordinator (no live member, pod
    /// unreachable or too slow) or by a pod with another status.
    pub errors: AtomicU64,
    /// Calls that failed in transport or took longer than the client's
    /// timeout.
    pub transport: AtomicU64,
}

impl LoadCounts {
    fn add(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    /// A counter's value.
    pub fn get(counter: &AtomicU64) -> u64 {
        counter.load(Ordering::Relaxed)
    }
}

/// How long a caller waits for one call.
const CALL_TIMEOUT: Duration = Duration::from_secs(3);

/// Starts `workers` callers; they stop when `stop` is set.
pub(crate) fn spawn(
    workers: usize,
    coordinators: Coordinators,
    destinations: Arc<[DestinationId]>,
    counts: Arc<LoadCounts>,
    stop: Arc<AtomicBool>,
) -> Vec<JoinHandle<()>> {
    (0..workers)
        .map(|_| {
            let coordinators = coordinators.clone();
            let destinations = destinations.clone();
            let counts = counts.clone();
            let stop = stop.clone();
            tokio::spawn(async move {
                let mut clients: HashMap<String, CoordinatorClient> = HashMap::new();
                while !stop.load(Ordering::Relaxed) {
                    let live: Vec<String> = coordinators
                        .read()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .iter()
                        .flatten()
                        .cloned()
                        .collect();
                    let (base, dest) = {
                        let mut rng = rand::rng();
                        if live.is_empty() || destinations.is_empty() {
                            (None, None)
                        } else {
                            (
                                Some(live[rng.random_range(0..live.len())].clone()),
                                Some(destinations[rng.random_range(0..destinations.len())].clone()),
                            )
                        }
                    };
                    let (Some(base), Some(dest)) = (base, dest) else {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    };
                    let client = match clients.get(&base) {
                        Some(c) => c.clone(),
                        None => match CoordinatorClient::new(&base) {
                            Ok(c) => {
                                clients.insert(base.clone(), c.clone());
                                c
                            }
                            Err(err) => {
                                tracing::warn!(%err, %base, "no client");
                                tokio::time::sleep(Duration::from_millis(50)).await;
                                continue;
                            }
                        },
                    };
                    LoadCounts::add(&counts.calls);
                    let call = client.call(&dest, http::Method::GET, "/work", "");
                    match tokio::time::timeout(CALL_TIMEOUT, call).await {
                        Ok(Ok(resp)) if resp.status == http::StatusCode::OK => {
                            LoadCounts::add(&counts.ok)
                        }
                        Ok(Ok(resp))
                            if resp.status.as_u16() == coordinator::http::STALE_OWNER_STATUS =>
                        {
                            LoadCounts::add(&counts.stale_passed)
                        }
                        Ok(Ok(_)) | Ok(Err(ClientError::Coordinator { .. })) => {
                            LoadCounts::add(&counts.errors)
                        }
                        Ok(Err(_)) | Err(_) => {
                            LoadCounts::add(&counts.transport);
                            // a killed coordinator: do not spin on it
                            tokio::time::sleep(Duration::from_millis(20)).await;
                        }
                    }
                }
            })
        })
        .collect()
}
