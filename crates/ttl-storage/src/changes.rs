//! The optional capability of following a record's writes as they happen:
//! [`TtlStorage::changes`](crate::TtlStorage::changes), and [`Feeds`], for
//! driver authors whose store pushes writes to one subscriber connection
//! (a pub/sub channel, a `LISTEN`) that must reach each key's followers.
//!
//! A follower (`vvm-host status --watch`, [`elections`' `observe`]) sees
//! every leadership that begins, even one that ends before any read could
//! have seen it, and, where the store tells it, the fencing token the write
//! took.
//!
//! [`elections`' `observe`]: https://docs.rs/elections

use std::{
    collections::HashMap,
    pin::Pin,
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    task::{Context, Poll},
};

use futures_channel::mpsc;
use futures_core::Stream;

/// One item of a [`Changes`] stream.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Change {
    /// The feed is live: every change applied from now on is reported, in
    /// the store's order. Read the record now (it may have changed while
    /// the feed was being armed); changes reported after this item come
    /// after that read's state or are already in it.
    Armed,
    /// A write gave the record this value (an insert, a swap to other
    /// bytes, a counted write). Renewals that keep the value need not be
    /// reported; if they are, they repeat the last value.
    Written {
        /// The record's new value.
        value: Vec<u8>,
        /// The counter's value set by the same write, for a counted write
        /// ([`TtlStorage::write_counted`](crate::TtlStorage::write_counted))
        /// whose count the driver can tell; `None` otherwise.
        count: Option<u64>,
    },
    /// The record was deleted. Expiry is reported as a delete where the
    /// store removes expired records itself (etcd's leases); elsewhere it
    /// is not reported at all: a follower reads or
    /// [`watch`](crate::TtlStorage::watch)es to see it.
    Deleted,
    /// The feed was interrupted: changes may be missing from here until the
    /// next [`Change::Armed`].
    Interrupted,
}

/// What [`TtlStorage::changes`](crate::TtlStorage::changes) returns: the
/// record's changes, from a first [`Change::Armed`] on. It owns its
/// subscription and may be dropped at any time. It ends when the storage is
/// gone or when its consumer falls [`FEED_CAPACITY`] changes behind:
/// subscribe again and read the record.
pub type Changes = Pin<Box<dyn Stream<Item = Change> + Send + 'static>>;

/// The driver cannot report a record's writes: the caller polls. Not a
/// failure: it is the default answer of
/// [`TtlStorage::changes`](crate::TtlStorage::changes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, thiserror::Error)]
#[error("this storage driver cannot report the writes of a record; poll instead")]
pub struct ChangesUnsupported;

/// How many changes a follower may be behind before its stream ends.
pub const FEED_CAPACITY: usize = 256;

/// The followers of one storage's records, by the key the driver's feed
/// names them with, and whether that feed is live. A driver subscribes a
/// follower in [`changes`](crate::TtlStorage::changes), publishes what its
/// feed reports, and marks the feed down while it may miss messages (each
/// follower then gets [`Change::Interrupted`], and [`Change::Armed`] once
/// it is live again).
///
/// ```
/// use std::sync::Arc;
/// use ttl_storage::changes::{Change, Feeds};
///
/// let feeds = Arc::new(Feeds::default());
/// let _follower = feeds.subscribe("leader/1".into()); // Armed once the feed is live
/// feeds.set_ready(true);
/// feeds.publish("leader/1", Change::Written { value: b"a".to_vec(), count: Some(7) });
/// ```
#[derive(Debug, Default)]
pub struct Feeds {
    inner: Mutex<Inner>,
}

#[derive(Debug, Default)]
struct Inner {
    ready: bool,
    next_id: u64,
    by_key: HashMap<String, HashMap<u64, mpsc::Sender<Change>>>,
}

impl Feeds {
    fn lock(&self) -> MutexGuard<'_, Inner> {
        // Never held across a panic point that leaves the map inconsistent.
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// A follower of `key`: its stream starts with [`Change::Armed`] now if
    /// the feed is live, otherwise when it becomes live.
    pub fn subscribe(self: &Arc<Self>, key: String) -> Changes {
        let (mut tx, rx) = mpsc::channel(FEED_CAPACITY);
        let mut inner = self.lock();
        if inner.ready {
            // A fresh channel has room.
            let _ = tx.try_send(Change::Armed);
        }
        let id = inner.next_id;
        inner.next_id = inner.next_id.wrapping_add(1);
        inner.by_key.entry(key.clone()).or_default().insert(id, tx);
        drop(inner);
        Box::pin(Follower {
            rx,
            feeds: Arc::clone(self),
            key,
            id,
        })
    }

    /// Reports `change` of `key` to its followers. A follower whose stream
    /// is full (or dropped) is removed: its stream ends.
    pub fn publish(&self, key: &str, change: Change) {
        let mut inner = self.lock();
        if let Some(followers) = inner.by_key.get_mut(key) {
            followers.retain(|_, tx| tx.try_send(change.clone()).is_ok());
            if followers.is_empty() {
                inner.by_key.remove(key);
            }
        }
    }

    /// Records whether the feed is live: each change of state is reported
    /// to every follower ([`Change::Armed`], [`Change::Interrupted`]).
    pub fn set_ready(&self, ready: bool) {
        let mut inner = self.lock();
        if inner.ready == ready {
            return;
        }
        inner.ready = ready;
        let change = if ready {
            Change::Armed
        } else {
            Change::Interrupted
        };
        inner.by_key.retain(|_, followers| {
            followers.retain(|_, tx| tx.try_send(change.clone()).is_ok());
            !followers.is_empty()
        });
    }

    /// Whether the feed is live.
    pub fn is_ready(&self) -> bool {
        self.lock().ready
    }

    /// Whether anyone follows `key` (a driver may skip work otherwise).
    pub fn is_followed(&self, key: &str) -> bool {
        self.lock().by_key.contains_key(key)
    }
}

/// One follower's stream; dropping it unsubscribes.
struct Follower {
    rx: mpsc::Receiver<Change>,
    feeds: Arc<Feeds>,
    key: String,
    id: u64,
}

impl Stream for Follower {
    type Item = Change;

    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Change>> {
        Pin::new(&mut self.rx).poll_next(cx)
    }
}

impl Drop for Follower {
    fn drop(&mut self) {
        let mut inner = self.feeds.lock();
        if let Some(followers) = inner.by_key.get_mut(&self.key) {
            followers.remove(&self.id);
            if followers.is_empty() {
                inner.by_key.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn next(changes: &mut Changes) -> Option<Option<Change>> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        match changes.as_mut().poll_next(&mut cx) {
            Poll::Ready(item) => Some(item),
            Poll::Pending => None,
        }
    }

    #[test]
    fn followers_get_their_keys_changes_and_the_feeds_state() {
        let feeds = Arc::new(Feeds::default());
        let mut a = feeds.subscribe("a".into());
        let mut b = feeds.subscribe("b".into());
        assert_eq!(next(&mut a), None, "not armed before the feed is live");
        feeds.set_ready(true);
        feeds.publish("a", Change::Deleted);
        assert_eq!(next(&mut a), Some(Some(Change::Armed)));
        assert_eq!(next(&mut a), Some(Some(Change::Deleted)));
        assert_eq!(next(&mut b), Some(Some(Change::Armed)));
        assert_eq!(next(&mut b), None, "another key's change is not b's");
        feeds.set_ready(false);
        assert_eq!(next(&mut b), Some(Some(Change::Interrupted)));
        let mut late = feeds.subscribe("a".into());
        assert_eq!(next(&mut late), None);
        drop(b);
        assert!(!feeds.is_followed("b"));
    }

    #[test]
    fn a_follower_that_falls_behind_is_ended() {
        let feeds = Arc::new(Feeds::default());
        feeds.set_ready(true);
        let mut a = feeds.subscribe("a".into());
        for _ in 0..FEED_CAPACITY + 2 {
            feeds.publish("a", Change::Deleted);
        }
        assert!(!feeds.is_followed("a"));
        let mut seen = 0;
        while let Some(Some(_)) = next(&mut a) {
            seen += 1;
        }
        assert!(seen <= FEED_CAPACITY + 1);
        assert_eq!(next(&mut a), Some(None), "the stream ends");
    }
}
