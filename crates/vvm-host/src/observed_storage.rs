//! One storage wrapper for vvm-host's storage observers (the health report,
//! [`crate::health`], and the test fault hook, [`crate::fault`]): an
//! [`Observer`] says what happens before and after each call, [`Observed`]
//! forwards the calls of the contract to the wrapped storage.

use std::{future::Future, sync::Arc, time::SystemTime};

use async_trait::async_trait;
use tokio::time::Instant;
use ttl_storage::{
    Counted, CountedWrite, DynTtlStorage, Key, Result, StorageError, Ttl, TtlStorage, Watch,
    WatchUnsupported,
};

/// The calls of the storage contract an observer sees.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Call {
    /// `insert_if_not_exists`
    Insert,
    /// `compare_and_swap`
    Swap,
    /// `compare_and_delete`
    Delete,
    /// `get`
    Get,
}

/// What [`Observer::before`] lets happen to a call.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Gate {
    /// The call goes to the store.
    Through,
    /// A compare-and-swap is answered "the record holds another value"
    /// without the store; any other call goes through.
    SwapLost,
}

/// When a call went to the store (after [`Observer::before`]).
#[derive(Debug, Clone, Copy)]
pub(crate) struct Started {
    /// The wall clock, for other processes.
    pub(crate) wall: SystemTime,
    /// The monotonic clock, for this one.
    pub(crate) instant: Instant,
}

/// How a call that went to the store ended.
#[derive(Debug)]
pub(crate) enum Outcome<'a> {
    /// An insert or swap that wrote.
    Wrote,
    /// An insert or swap whose condition failed, or a delete or read that
    /// answered.
    Answered,
    /// The store failed.
    Failed(&'a StorageError),
}

/// What happens around each storage call.
#[async_trait]
pub(crate) trait Observer: Send + Sync + 'static {
    /// Before `call` goes to the store: an error fails it without the store.
    async fn before(&self, call: Call) -> Result<Gate> {
        let _ = call;
        Ok(Gate::Through)
    }

    /// After a call the store answered or failed; it went to the store at
    /// `started`.
    async fn after(&self, key: &Key, started: Started, outcome: Outcome<'_>);
}

/// `inner`, observed by `O`.
pub(crate) struct Observed<O> {
    inner: DynTtlStorage,
    observer: O,
}

impl<O: Observer> Observed<O> {
    /// `inner`, with `observer` around each call.
    pub(crate) fn wrap(inner: DynTtlStorage, observer: O) -> DynTtlStorage {
        Arc::new(Observed { inner, observer })
    }

    /// An insert or a swap: `Ok(true)` is a write.
    async fn write(
        &self,
        call: Call,
        key: &Key,
        op: impl Future<Output = Result<bool>> + Send,
    ) -> Result<bool> {
        if self.observer.before(call).await? == Gate::SwapLost && call == Call::Swap {
            return Ok(false);
        }
        self.observe(key, op, |written| *written).await
    }

    /// A delete or a read: never a write.
    async fn other<T: Send>(
        &self,
        call: Call,
        key: &Key,
        op: impl Future<Output = Result<T>> + Send,
    ) -> Result<T> {
        self.observer.before(call).await?;
        self.observe(key, op, |_| false).await
    }

    async fn observe<T: Send>(
        &self,
        key: &Key,
        op: impl Future<Output = Result<T>> + Send,
        wrote: fn(&T) -> bool,
    ) -> Result<T> {
        let started = Started {
            wall: SystemTime::now(),
            instant: Instant::now(),
        };
        let result = op.await;
        let outcome = match &result {
            Ok(value) if wrote(value) => Outcome::Wrote,
            Ok(_) => Outcome::Answered,
            Err(err) => Outcome::Failed(err),
        };
        self.observer.after(key, started, outcome).await;
        result
    }
}

#[async_trait]
impl<O: Observer> TtlStorage for Observed<O> {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        let op = self.inner.insert_if_not_exists(key, value, ttl);
        self.write(Call::Insert, key, op).await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        let op = self.inner.compare_and_swap(key, old, new, ttl);
        self.write(Call::Swap, key, op).await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        let op = self.inner.compare_and_delete(key, value);
        self.other(Call::Delete, key, op).await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.other(Call::Get, key, self.inner.get(key)).await
    }

    /// Observed as the insert or swap it makes of the record.
    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        let call = if write.expected.is_some() {
            Call::Swap
        } else {
            Call::Insert
        };
        if self.observer.before(call).await? == Gate::SwapLost && call == Call::Swap {
            return Ok(Counted::Refused);
        }
        let op = self.inner.write_counted(write);
        self.observe(write.key, op, |counted| {
            matches!(counted, Counted::Written(_))
        })
        .await
    }

    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        self.inner.watch(key)
    }

    fn changes(
        &self,
        key: &Key,
        counter: Option<&Key>,
    ) -> std::result::Result<ttl_storage::Changes, ttl_storage::ChangesUnsupported> {
        self.inner.changes(key, counter)
    }
}
