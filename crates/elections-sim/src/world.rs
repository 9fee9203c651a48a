//! The shared world of one run: the store, the fault state, the history,
//! and the per-contender storage and killer that inject faults into it.

use std::{
    sync::{Arc, Mutex, MutexGuard, PoisonError},
    time::Duration,
};

use async_trait::async_trait;
use elections::Killer;
use tokio::{sync::Notify, task::AbortHandle, time::Instant};
use ttl_storage::{Key, Result, StorageError, Ttl, TtlStorage};

use crate::{
    anchor::{Anchor, Store},
    groups::Group,
    history::{EndCause, History, Who},
    rng::SimRng,
};

/// Operations of the run beyond acquire and release.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct OpCounts {
    /// Leaderships taken by `campaign` (a visible candidate) rather than one try.
    pub campaigns: u64,
    /// Hand-overs that succeeded.
    pub handovers: u64,
    /// Hand-overs refused by the library (the named candidate had gone); the
    /// leader kept leading.
    pub handover_refusals: u64,
    /// Hand-overs not asked for because nobody was listed (still leading).
    pub handover_skipped: u64,
    /// Hand-overs that failed otherwise (the leadership ended, a store error).
    pub handover_failures: u64,
    /// Observations reported.
    pub observations: u64,
    /// Identical observations reported twice in a row. Not a failure: they
    /// are distinct records with the same visible fields (a contender's
    /// failed attempt, then its next one, read before its fencing token).
    pub observe_duplicates: u64,
    /// Keys whose leader at the end of the run (leading for the last 3 s)
    /// is not what the observer last reported: a failure.
    pub observe_stale: u64,
    /// Writes made by the observer: a failure.
    pub observer_writes: u64,
    /// Leaderships (bare elections) the observer never reported, following
    /// the store's feed of writes (`TtlStorage::changes`): a failure.
    pub observe_missed: u64,
}

impl OpCounts {
    /// Adds `other` to `self`.
    pub fn add(&mut self, other: &OpCounts) {
        self.campaigns += other.campaigns;
        self.handovers += other.handovers;
        self.handover_refusals += other.handover_refusals;
        self.handover_skipped += other.handover_skipped;
        self.handover_failures += other.handover_failures;
        self.observations += other.observations;
        self.observe_duplicates += other.observe_duplicates;
        self.observe_stale += other.observe_stale;
        self.observer_writes += other.observer_writes;
        self.observe_missed += other.observe_missed;
    }
}

/// Counts of injected faults, by kind.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultCounts {
    /// Transient errors (including calls refused while partitioned).
    pub transient: u64,
    /// Outcome unknown, write applied.
    pub unknown_applied: u64,
    /// Outcome unknown, write not applied.
    pub unknown_not_applied: u64,
    /// Outcome unknown, write applied later (delayed in the network).
    pub late_apply: u64,
    /// Answers delayed past the renewal interval, after the write applied.
    pub slow_answer: u64,
    /// Whole-storage stalls.
    pub stalls: u64,
    /// Contender pauses (not polled / no progress for a while).
    pub pauses: u64,
    /// Contender partitions (every call fails).
    pub partitions: u64,
    /// Crashes (process ends without releasing).
    pub crashes: u64,
    /// Killer firings.
    pub kills: u64,
}

impl FaultCounts {
    /// Every fault injected.
    pub fn total(&self) -> u64 {
        self.transient
            + self.unknown_applied
            + self.unknown_not_applied
            + self.late_apply
            + self.slow_answer
            + self.stalls
            + self.pauses
            + self.partitions
            + self.crashes
    }

    /// Adds `other` into `self`.
    pub fn add(&mut self, other: &FaultCounts) {
        self.transient += other.transient;
        self.unknown_applied += other.unknown_applied;
        self.unknown_not_applied += other.unknown_not_applied;
        self.late_apply += other.late_apply;
        self.slow_answer += other.slow_answer;
        self.stalls += other.stalls;
        self.pauses += other.pauses;
        self.partitions += other.partitions;
        self.crashes += other.crashes;
        self.kills += other.kills;
    }
}

/// Mutable state of a run, behind one lock (the runtime is single-threaded).
pub(crate) struct State {
    pub(crate) rng: SimRng,
    pub(crate) history: History,
    pub(crate) faults: FaultCounts,
    /// Probability that one storage call gets a per-call fault.
    pub(crate) op_fault_p: f64,
    /// Per-call faults and late applies are injected only while true.
    pub(crate) injecting: bool,
    /// When faults stop: late applies land no later than this, so no
    /// delayed write is still in flight once the calm phase begins.
    pub(crate) heal_at: Instant,
    pub(crate) stalled: bool,
    pub(crate) paused: Vec<bool>,
    pub(crate) partitioned: Vec<bool>,
    /// Current incarnation of each contender, `None` while dead.
    pub(crate) alive: Vec<Option<u32>>,
    pub(crate) tasks: Vec<Option<AbortHandle>>,
    /// Open interval of each contender, if leading: (incarnation, index).
    pub(crate) open: Vec<Option<(u32, usize)>>,
    /// Bug switch for the checker's own test: insert overwrites live records.
    pub(crate) broken_insert: bool,
    pub(crate) ops: OpCounts,
    /// The last observation of each key (the observers').
    pub(crate) observed: std::collections::BTreeMap<String, elections::Observation>,
    /// Every leader the observer of each key reported, in order.
    pub(crate) observed_leaders: std::collections::BTreeMap<String, Vec<Vec<u8>>>,
    /// Hand-over requests: asked, told, and applied ([`crate::requests`]).
    pub(crate) requests: crate::requests::Ledger,
    /// Requests not posted (another pending).
    pub(crate) requests_busy: u64,
    /// Priority seeds: the stands and preemptions ([`crate::preemptions`]).
    pub(crate) priorities: crate::preemptions::PriorityLog,
}

impl State {
    /// When the open leadership interval of `who` began, if it leads.
    pub(crate) fn tenure_start(&self, who: Who) -> Option<Duration> {
        let (incarnation, idx) = self.open.get(who.contender).copied().flatten()?;
        (incarnation == who.incarnation)
            .then(|| self.history.intervals().get(idx).map(|iv| iv.start))
            .flatten()
    }
}

/// The world of one run.
pub(crate) struct World {
    /// The store, with the drivers' expiry anchors (see [`crate::anchor`]).
    pub(crate) store: Arc<Store>,
    pub(crate) lease: Duration,
    state: Mutex<State>,
    /// Notified whenever pauses, stalls or partitions change. (Not a
    /// `watch` channel: its waiters wake in a randomly seeded order, which
    /// would make runs irreproducible.)
    changed: Notify,
}

impl World {
    pub(crate) fn new(state: State, lease: Duration, anchor: Anchor, guarded: bool) -> Arc<Self> {
        Arc::new(World {
            store: Arc::new(Store::new(anchor, guarded)),
            lease,
            state: Mutex::new(state),
            changed: Notify::new(),
        })
    }

    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Changes the fault state and wakes every blocked call to re-check it.
    pub(crate) fn update(&self, f: impl FnOnce(&mut State)) {
        f(&mut self.lock());
        self.changed.notify_waiters();
    }

    /// Waits while the contender is paused or the whole store is stalled.
    pub(crate) async fn wait_runnable(&self, contender: usize, storage: bool) {
        loop {
            let notified = self.changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let state = self.lock();
                let blocked = state.paused[contender] || (storage && state.stalled);
                if !blocked {
                    return;
                }
            }
            notified.await;
        }
    }

    /// `who` starts acting as leader of `key` now, unless it is dead (a dead
    /// process's leftover tasks cannot act). `group`: a VVM's lock and size.
    pub(crate) fn begin_interval(&self, who: Who, key: &str, token: u64, group: Option<Group>) {
        let mut state = self.lock();
        if state.alive[who.contender] != Some(who.incarnation) {
            return;
        }
        let idx = state.history.begin(key, who, token, group, Instant::now());
        state.open[who.contender] = Some((who.incarnation, idx));
    }

    /// Ends the open interval of `who` (if any) at `now`.
    pub(crate) fn end_interval(&self, who: Who, cause: EndCause) {
        let mut state = self.lock();
        if let Some((incarnation, idx)) = state.open[who.contender]
            && incarnation == who.incarnation
        {
            state.open[who.contender] = None;
            state.history.end(idx, Instant::now(), cause);
        }
    }

    /// The process of `who` dies now: its interval ends, its task is aborted.
    pub(crate) fn die(&self, who: Who, cause: EndCause) {
        let mut state = self.lock();
        if state.alive[who.contender] != Some(who.incarnation) {
            return; // already dead, or a previous incarnation's leftover killer
        }
        if let Some((_, idx)) = state.open[who.contender].take() {
            state.history.end(idx, Instant::now(), cause);
        }
        state.alive[who.contender] = None;
        let at = state.history.offset(Instant::now());
        state.priorities.end(who.contender, at, false);
        if let Some(task) = state.tasks[who.contender].take() {
            task.abort();
        }
        match cause {
            EndCause::Killed => state.faults.kills += 1,
            EndCause::Crashed => state.faults.crashes += 1,
            _ => {}
        }
        let line = format!("dead  c{}/i{} {cause:?}", who.contender, who.incarnation);
        state.history.note(Instant::now(), line);
    }
}

/// What happens to one storage call.
enum CallFault {
    None,
    Transient,
    UnknownApplied,
    UnknownNotApplied,
    LateApply(Duration),
    SlowAnswer(Duration),
}

/// One contender process's view of the store, with faults. A dead
/// process's view is cut off for good: its leftover tasks reach nothing.
pub(crate) struct SimStorage {
    pub(crate) world: Arc<World>,
    pub(crate) who: Who,
}

impl SimStorage {
    fn draw(&self, write: bool) -> CallFault {
        let d = self.world.lease;
        let mut state = self.world.lock();
        if state.alive[self.who.contender] != Some(self.who.incarnation) {
            return CallFault::Transient;
        }
        if state.partitioned[self.who.contender] {
            state.faults.transient += 1;
            return CallFault::Transient;
        }
        let p = state.op_fault_p;
        if !state.injecting || !state.rng.chance(p) {
            return CallFault::None;
        }
        let fault = match state.rng.below(if write { 6 } else { 2 }) {
            0 => CallFault::Transient,
            1 => CallFault::SlowAnswer(state.rng.between(d / 4, d * 6 / 5)),
            2 => CallFault::UnknownApplied,
            3 => CallFault::UnknownNotApplied,
            4 => {
                // Up to a whole lease (a request stuck in a retransmission
                // queue): long enough to land after the writer's next
                // renewals, where a send-anchored expiry would hurt.
                let delay = state.rng.between(Duration::ZERO, d);
                let room = state.heal_at.saturating_duration_since(Instant::now());
                CallFault::LateApply(delay.min(room))
            }
            _ => CallFault::Transient,
        };
        match fault {
            CallFault::Transient => state.faults.transient += 1,
            CallFault::SlowAnswer(_) => state.faults.slow_answer += 1,
            CallFault::UnknownApplied => state.faults.unknown_applied += 1,
            CallFault::UnknownNotApplied => state.faults.unknown_not_applied += 1,
            CallFault::LateApply(_) => state.faults.late_apply += 1,
            CallFault::None => {}
        }
        fault
    }

    /// Runs one call through the fault model. `call` makes the real call
    /// as an owned future, so it can also be applied late.
    async fn run<T, F>(&self, write: bool, call: impl Fn() -> F) -> Result<T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T>> + Send + 'static,
    {
        self.world.wait_runnable(self.who.contender, true).await;
        match self.draw(write) {
            CallFault::None => call().await,
            CallFault::Transient => Err(StorageError::transient("sim: transient")),
            CallFault::UnknownNotApplied => Err(StorageError::outcome_unknown("sim: not applied")),
            CallFault::UnknownApplied => {
                call().await?;
                Err(StorageError::outcome_unknown("sim: applied"))
            }
            CallFault::LateApply(delay) => {
                let late = call();
                tokio::spawn(async move {
                    tokio::time::sleep(delay).await;
                    let _ = late.await;
                });
                Err(StorageError::outcome_unknown("sim: in flight"))
            }
            CallFault::SlowAnswer(latency) => {
                let result = call().await;
                tokio::time::sleep(latency).await;
                result
            }
        }
    }
}

#[async_trait]
impl TtlStorage for SimStorage {
    async fn insert_if_not_exists(&self, key: &Key, value: &[u8], ttl: Ttl) -> Result<bool> {
        let (store, key, value) = (self.world.store.clone(), key.clone(), value.to_vec());
        let broken = self.world.lock().broken_insert;
        let world = self.world.clone();
        self.run(true, move || {
            // Sent now (a late write's future is made when it is sent).
            let sent = Instant::now();
            let (store, key, value) = (store.clone(), key.clone(), value.clone());
            let world = world.clone();
            async move {
                if broken && let Some(current) = store.map.get(&key).await? {
                    store.delete(&key, &current).await?;
                }
                let inserted = store.insert(&key, &value, ttl, sent).await;
                if let Ok(true) = inserted {
                    let mut s = world.lock();
                    let at = s.history.offset(Instant::now());
                    s.requests.applied_insert(&key, &value, at);
                }
                inserted
            }
        })
        .await
    }

    async fn compare_and_swap(&self, key: &Key, old: &[u8], new: &[u8], ttl: Ttl) -> Result<bool> {
        let (store, key, old, new) = (
            self.world.store.clone(),
            key.clone(),
            old.to_vec(),
            new.to_vec(),
        );
        let world = self.world.clone();
        self.run(true, move || {
            let sent = Instant::now();
            let (store, key, old, new) = (store.clone(), key.clone(), old.clone(), new.clone());
            let world = world.clone();
            async move {
                let swapped = store.swap(&key, &old, &new, ttl, sent).await;
                // The ground truth of hand-over requests, as applied.
                if let Ok(true) = swapped {
                    let mut s = world.lock();
                    let at = s.history.offset(Instant::now());
                    s.requests.applied_swap(&key, &old, &new, at);
                }
                swapped
            }
        })
        .await
    }

    async fn compare_and_delete(&self, key: &Key, value: &[u8]) -> Result<bool> {
        let (store, key, value) = (self.world.store.clone(), key.clone(), value.to_vec());
        self.run(true, move || {
            let (store, key, value) = (store.clone(), key.clone(), value.clone());
            async move { store.delete(&key, &value).await }
        })
        .await
    }

    async fn get(&self, key: &Key) -> Result<Option<Vec<u8>>> {
        let (store, key) = (self.world.store.clone(), key.clone());
        self.run(false, move || {
            let (store, key) = (store.clone(), key.clone());
            async move { store.map.get(&key).await }
        })
        .await
    }
}

/// The killer of one incarnation: the process dies at the deadline.
pub(crate) struct SimKiller {
    pub(crate) world: Arc<World>,
    pub(crate) who: Who,
}

impl Killer for SimKiller {
    fn kill(&self, _key: &Key, _deadline: Instant) {
        self.world.die(self.who, EndCause::Killed);
    }
}
