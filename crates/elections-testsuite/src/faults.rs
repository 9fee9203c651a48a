//! [`FaultyStorage`]: a storage wrapper that injects the faults elections
//! must survive, so every driver runs the same fault cases.

use std::{
    collections::VecDeque,
    sync::{Arc, Mutex, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use ttl_storage::{
    Counted, CountedWrite, DynTtlStorage, Key, Result, StorageError, Ttl, TtlStorage, Watch,
    WatchUnsupported,
};

/// The operations of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Op {
    /// `insert_if_not_exists`
    Insert,
    /// `compare_and_swap`
    Cas,
    /// `compare_and_delete`
    Cad,
    /// `get`
    Get,
    /// `write_counted`, when let through ([`FaultyStorage::set_counted`]).
    Counted,
}

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// Fail with a transient error without calling the store.
    Transient,
    /// Call the store, then report "outcome unknown" (the write was applied).
    UnknownApplied,
    /// Report "outcome unknown" without calling the store (not applied).
    UnknownNotApplied,
    /// Wait this long, then call the store.
    Latency(Duration),
}

#[derive(Default)]
struct Plan {
    queued: Vec<(Op, VecDeque<Fault>)>,
    latency: Option<Duration>,
    partitioned: bool,
    refused: bool,
    watch_hidden: bool,
    counted: bool,
    injected: u64,
    calls: [u64; 5],
}

/// Why every call fails, without the store.
#[derive(Debug, Clone, Copy)]
enum Cut {
    /// A transient error: the store is unreachable.
    Partitioned,
    /// A permanent error: the store refuses this client.
    Refused,
}

/// Wraps a storage and injects faults into chosen calls.
///
/// ```
/// # use std::sync::Arc;
/// use elections_testsuite::{Fault, FaultyStorage, Op};
/// # fn demo(real: ttl_storage::DynTtlStorage) {
/// let faulty = FaultyStorage::new(real);
/// faulty.inject(Op::Cas, Fault::Transient, 2); // the next two CAS calls fail
/// faulty.set_partitioned(true);                // every call fails until healed
/// # }
/// ```
pub struct FaultyStorage {
    inner: DynTtlStorage,
    plan: Mutex<Plan>,
}

impl FaultyStorage {
    /// Wraps `inner`; no faults until some are injected.
    pub fn new(inner: DynTtlStorage) -> Arc<Self> {
        Arc::new(FaultyStorage {
            inner,
            plan: Mutex::new(Plan::default()),
        })
    }

    /// The wrapped storage, to act on it without faults.
    pub fn inner(&self) -> &DynTtlStorage {
        &self.inner
    }

    /// The next `times` calls of `op` suffer `fault`, after any queued before.
    pub fn inject(&self, op: Op, fault: Fault, times: usize) {
        let mut plan = self.lock();
        let idx = match plan.queued.iter().position(|(o, _)| *o == op) {
            Some(idx) => idx,
            None => {
                plan.queued.push((op, VecDeque::new()));
                plan.queued.len() - 1
            }
        };
        plan.queued[idx].1.extend(std::iter::repeat_n(fault, times));
    }

    /// Adds `latency` before every call from now on (`None` removes it).
    pub fn set_latency(&self, latency: Option<Duration>) {
        self.lock().latency = latency;
    }

    /// While partitioned every call fails with a transient error.
    pub fn set_partitioned(&self, partitioned: bool) {
        self.lock().partitioned = partitioned;
    }

    /// While refused every call fails with a permanent error (bad
    /// credentials, say); a refusal outranks a partition.
    pub fn set_refused(&self, refused: bool) {
        self.lock().refused = refused;
    }

    /// While hidden, `watch` answers [`WatchUnsupported`] (a storage
    /// without the capability): waiters must poll.
    pub fn set_watch_hidden(&self, hidden: bool) {
        self.lock().watch_hidden = hidden;
    }

    /// While let through, `write_counted` goes to the wrapped storage
    /// (with the faults of [`Op::Counted`]); otherwise (the default) it
    /// answers [`Counted::Unsupported`] without a call, so that the faults
    /// of the plain writes reach the steps callers then take.
    pub fn set_counted(&self, counted: bool) {
        self.lock().counted = counted;
    }

    /// Faults injected so far (queued ones that fired, and partitioned or
    /// refused calls).
    pub fn injected(&self) -> u64 {
        self.lock().injected
    }

    /// Calls of `op` seen so far.
    pub fn calls(&self, op: Op) -> u64 {
        self.lock().calls[op as usize]
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Plan> {
        self.plan.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Decides what happens to the next call of `op`.
    fn next(&self, op: Op) -> (Option<Fault>, Option<Duration>, Option<Cut>) {
        let mut plan = self.lock();
        plan.calls[op as usize] += 1;
        let cut = match (plan.refused, plan.partitioned) {
            (true, _) => Some(Cut::Refused),
            (false, true) => Some(Cut::Partitioned),
            (false, false) => None,
        };
        if cut.is_some() {
            plan.injected += 1;
            return (None, None, cut);
        }
        let fault = plan
            .queued
            .iter_mut()
            .find(|(o, _)| *o == op)
            .and_then(|(_, q)| q.pop_front());
        if fault.is_some() {
            plan.injected += 1;
        }
        (fault, plan.latency, None)
    }

    async fn run<T>(&self, op: Op, call: impl Future<Output = Result<T>>) -> Result<T> {
        let (fault, latency, cut) = self.next(op);
        match cut {
            Some(Cut::Partitioned) => {
                return Err(StorageError::transient(format!(
                    "injected: partitioned ({op:?})"
                )));
            }
            Some(Cut::Refused) => {
                return Err(StorageError::permanent(format!(
                    "injected: refused ({op:?})"
                )));
            }
            None => {}
        }
        if let Some(latency) = latency {
            tokio::time::sleep(latency).await;
        }
        match fault {
            None => call.await,
            Some(Fault::Transient) => Err(StorageError::transient(format!(
                "injected: transient ({op:?})"
            ))),
            Some(Fault::UnknownNotApplied) => Err(StorageError::outcome_unknown(format!(
                "injected: outcome unknown, not applied ({op:?})"
            ))),
            Some(Fault::UnknownApplied) => {
                let _ = call.await?;
                Err(StorageError::outcome_unknown(format!(
                    "injected: outcome unknown, applied ({op:?})"
                )))
            }
            Some(Fault::Latency(extra)) => {
                tokio::time::sleep(extra).await;
                call.await
            }
        }
    }
}

#[async_trait]
impl TtlStorage for FaultyStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        self.run(Op::Insert, self.inner.insert_if_not_exists(key, value, ttl))
            .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        self.run(Op::Cas, self.inner.compare_and_swap(key, old, new, ttl))
            .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        self.run(Op::Cad, self.inner.compare_and_delete(key, value))
            .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        self.run(Op::Get, self.inner.get(key)).await
    }

    async fn write_counted(&self, write: CountedWrite<'_>) -> Result<Counted> {
        if !self.lock().counted {
            return Ok(Counted::Unsupported);
        }
        self.run(Op::Counted, self.inner.write_counted(write)).await
    }

    /// Watches through to the wrapped storage, without faults (a waiter
    /// re-checks with the faulty operations anyway), unless hidden.
    fn watch(&self, key: &Key) -> std::result::Result<Watch, WatchUnsupported> {
        if self.lock().watch_hidden {
            return Err(WatchUnsupported);
        }
        self.inner.watch(key)
    }
}
