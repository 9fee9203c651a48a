//! [`Waiters`]: for driver authors, the waiters of
//! [`TtlStorage::watch`](crate::TtlStorage::watch) by record key, woken by
//! the driver's notification feed (a pub/sub subscription, a `LISTEN`
//! connection, ...), and whether that feed is live.
//!
//! A driver registers a waiter when `watch` is called (before it reads the
//! record, so a removal after the call is never missed), wakes the key's
//! waiters when its feed reports a removal, and marks the feed down when it
//! may miss notifications: going down wakes every waiter, and while it is
//! down `register` answers `None`, so `watch` answers
//! [`WatchUnsupported`](crate::WatchUnsupported) and callers poll.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() {
//! use std::sync::Arc;
//! use ttl_storage::waiters::Waiters;
//!
//! let waiters = Arc::new(Waiters::default());
//! assert!(waiters.register("leader/1".into()).is_none()); // feed not live yet
//! waiters.set_ready(true);
//! let waiter = waiters.register("leader/1".into()).expect("feed is live");
//! waiters.wake("leader/1"); // the feed reported a delete of leader/1
//! waiter.woken().await;
//! # }
//! ```

use std::{
    collections::HashMap,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
};

use futures_channel::oneshot;

/// The registered waiters of one storage. A waiter is woken by sending on
/// (or dropping) its channel; both complete its [`Registration`].
#[derive(Debug, Default)]
pub struct Waiters {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    /// The subscription is live: a delete published now reaches us.
    ready: bool,
    next_id: u64,
    by_key: HashMap<String, HashMap<u64, oneshot::Sender<()>>>,
}

impl Waiters {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // The lock is never held across a panic point that leaves the map
        // inconsistent; a poisoned lock is still usable.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a waiter of `key`, or `None` while the subscription is not
    /// live (the caller must poll). Checked and registered under one lock,
    /// so a later [`set_ready(false)`](Self::set_ready) wakes it.
    pub fn register(self: &Arc<Self>, key: String) -> Option<Registration> {
        let mut inner = self.lock();
        if !inner.ready {
            return None;
        }
        let id = inner.next_id;
        inner.next_id = inner.next_id.wrapping_add(1);
        let (tx, rx) = oneshot::channel();
        inner.by_key.entry(key.clone()).or_default().insert(id, tx);
        Some(Registration {
            rx,
            _deregister: Deregister {
                waiters: Arc::clone(self),
                key,
                id,
            },
        })
    }

    /// Wakes every waiter of `key`.
    pub fn wake(&self, key: &str) {
        let woken = self.lock().by_key.remove(key);
        for (_, tx) in woken.into_iter().flatten() {
            let _ = tx.send(());
        }
    }

    /// Wakes every waiter (notifications may have been missed).
    pub fn wake_all(&self) {
        let woken = std::mem::take(&mut self.lock().by_key);
        drop(woken);
    }

    /// Records whether the subscription is live. Going down wakes every
    /// waiter: deletes may now go unnoticed, so they re-check and poll.
    pub fn set_ready(&self, ready: bool) {
        let woken = {
            let mut inner = self.lock();
            inner.ready = ready;
            if ready {
                return;
            }
            std::mem::take(&mut inner.by_key)
        };
        drop(woken);
    }

    /// Whether the subscription is live.
    pub fn is_ready(&self) -> bool {
        self.lock().ready
    }

    /// How many waiters are registered (for tests).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.lock().by_key.values().map(HashMap::len).sum()
    }
}

/// One registered waiter: [`woken`](Self::woken) completes when it is
/// woken. Dropping it deregisters it.
#[derive(Debug)]
pub struct Registration {
    rx: oneshot::Receiver<()>,
    _deregister: Deregister,
}

impl Registration {
    /// Completes when the waiter is woken (or the storage is gone).
    pub async fn woken(self) {
        let Registration { rx, _deregister } = self;
        let _ = rx.await;
    }
}

#[derive(Debug)]
struct Deregister {
    waiters: Arc<Waiters>,
    key: String,
    id: u64,
}

impl Drop for Deregister {
    fn drop(&mut self) {
        let mut inner = self.waiters.lock();
        if let Some(of_key) = inner.by_key.get_mut(&self.key) {
            of_key.remove(&self.id);
            if of_key.is_empty() {
                inner.by_key.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::time::Duration;

    use super::*;

    async fn completes(registration: Registration) -> bool {
        tokio::time::timeout(Duration::from_secs(5), registration.woken())
            .await
            .is_ok()
    }

    #[tokio::test]
    async fn not_ready_refuses_and_going_down_wakes_everyone() {
        let waiters = Arc::new(Waiters::default());
        assert!(waiters.register("a".into()).is_none());
        waiters.set_ready(true);
        assert!(waiters.is_ready());
        let a = waiters.register("a".into()).unwrap();
        let b = waiters.register("b".into()).unwrap();
        waiters.set_ready(false);
        assert!(completes(a).await);
        assert!(completes(b).await);
        assert!(waiters.register("a".into()).is_none());
    }

    #[tokio::test]
    async fn wake_wakes_only_that_key_and_drop_deregisters() {
        let waiters = Arc::new(Waiters::default());
        waiters.set_ready(true);
        let a1 = waiters.register("a".into()).unwrap();
        let a2 = waiters.register("a".into()).unwrap();
        let b = waiters.register("b".into()).unwrap();
        waiters.wake("a");
        assert!(completes(a1).await);
        assert!(completes(a2).await);
        assert_eq!(waiters.len(), 1);
        drop(b);
        assert_eq!(waiters.len(), 0);
        let c = waiters.register("c".into()).unwrap();
        waiters.wake_all();
        assert!(waiters.is_ready());
        assert!(completes(c).await);
    }
}
