//! [`LiveCount`]: how many of something are still live, and a wait until
//! none is (the renewals of the renewal shards, the timers of the killer
//! clock: cleanup waits for both to reach zero before it ends their tasks).

use std::{
    pin::pin,
    sync::atomic::{AtomicUsize, Ordering},
};

use tokio::sync::Notify;

/// A count of live items that can be waited on until it reaches zero.
#[derive(Default)]
pub(crate) struct LiveCount {
    count: AtomicUsize,
    /// Told when the count reaches zero.
    idle: Notify,
}

impl LiveCount {
    /// One more is live.
    pub(crate) fn enter(&self) {
        self.count.fetch_add(1, Ordering::AcqRel);
    }

    /// One fewer is live (call once per [`LiveCount::enter`]).
    pub(crate) fn leave(&self) {
        if self.count.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.idle.notify_waiters();
        }
    }

    /// How many are live.
    pub(crate) fn get(&self) -> usize {
        self.count.load(Ordering::Acquire)
    }

    /// Returns once none is live.
    pub(crate) async fn idle(&self) {
        loop {
            let mut idle = pin!(self.idle.notified());
            idle.as_mut().enable();
            if self.get() == 0 {
                return;
            }
            idle.await;
        }
    }
}
