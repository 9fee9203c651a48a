//! Coalescing of concurrent lookups of one key: the first caller runs the
//! lookup, the others wait for its answer.

use std::collections::HashMap;
use std::hash::Hash;
use std::sync::{Arc, Mutex};

use tokio::sync::OnceCell;

/// Lookups in flight, by key.
pub(crate) struct Flights<K, V> {
    running: Mutex<HashMap<K, Arc<OnceCell<V>>>>,
}

impl<K, V> Default for Flights<K, V> {
    fn default() -> Self {
        Self {
            running: Mutex::new(HashMap::new()),
        }
    }
}

impl<K: Hash + Eq + Clone, V: Clone> Flights<K, V> {
    /// Runs `lookup` unless a lookup of `key` is already running, in which
    /// case its answer is shared. If the running caller is dropped midway,
    /// a waiting one takes over.
    pub(crate) async fn run<F, Fut>(&self, key: &K, lookup: F) -> V
    where
        F: FnOnce() -> Fut,
        Fut: Future<Output = V>,
    {
        let cell = self
            .lock()
            .entry(key.clone())
            .or_insert_with(|| Arc::new(OnceCell::new()))
            .clone();
        let value = cell.get_or_init(lookup).await.clone();
        let mut running = self.lock();
        if running.get(key).is_some_and(|c| Arc::ptr_eq(c, &cell)) {
            running.remove(key);
        }
        value
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, Arc<OnceCell<V>>>> {
        self.running.lock().unwrap_or_else(|p| p.into_inner())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicUsize, Ordering};

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn concurrent_callers_share_one_lookup() {
        let flights: Arc<Flights<String, usize>> = Arc::default();
        let calls = Arc::new(AtomicUsize::new(0));
        let started = Arc::new(AtomicUsize::new(0));
        let gate = Arc::new(tokio::sync::Notify::new());
        let tasks: Vec<_> = (0..20)
            .map(|_| {
                let (flights, calls, gate) = (flights.clone(), calls.clone(), gate.clone());
                let started = started.clone();
                tokio::spawn(async move {
                    started.fetch_add(1, Ordering::SeqCst);
                    flights
                        .run(&"k".to_owned(), || async move {
                            calls.fetch_add(1, Ordering::SeqCst);
                            gate.notified().await;
                            7
                        })
                        .await
                })
            })
            .collect();
        while calls.load(Ordering::SeqCst) == 0 || started.load(Ordering::SeqCst) < 20 {
            tokio::task::yield_now().await;
        }
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        gate.notify_one();
        for t in tasks {
            assert_eq!(t.await.unwrap(), 7);
        }
        assert_eq!(calls.load(Ordering::SeqCst), 1);
        assert!(flights.lock().is_empty());
    }
}
