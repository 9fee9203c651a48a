//! The killer clock: one task keeps the deadline of every leadership of an
//! [`Elections`](crate::Elections).
//!
//! Each leadership has a [`KillerTimer`] (its deadline, under a lock of
//! its own) and an entry in the clock's timer queue, due at the deadline
//! the clock last saw. When an entry comes due the clock looks at the
//! timer: a deadline in force that has come fires the killer; a later one
//! (renewals push it without telling the clock) is due again then; a
//! disarmed timer leaves the queue. Only a change that makes the deadline
//! earlier than the one the clock waits for (a cap before a retry), a
//! disarm, or a deadline found already passed sends the timer to the clock
//! at once. A leadership renewed every `d/4` so costs the clock one look
//! per `0.8 d` and no wake-up per renewal.
//!
//! The clock is a task apart from the renewal tasks, so a renewal stuck on
//! the store does not hold it up; it does nothing but look at deadlines
//! and call [`Killer::kill`].

use std::{
    pin::pin,
    sync::{Arc, Mutex, MutexGuard, OnceLock, PoisonError},
    time::Duration,
};

use futures::{FutureExt, StreamExt};
use tokio::{sync::mpsc, time::Instant};
use tokio_util::{
    sync::CancellationToken,
    task::TaskTracker,
    time::{DelayQueue, delay_queue},
};
use tracing::Instrument;
use ttl_storage::Key;

use super::{ArmEvent, ArmReason, Killer};
use crate::{
    end::{EndReason, EndSignal},
    live_count::LiveCount,
};

/// Timers the clock looks at before it yields to the other tasks.
const SLICE: usize = 1024;

/// The deadline of one leadership, kept by its elections' [`KillerClock`].
///
/// Dropping every handle does **not** disarm it: only [`KillerTimer::disarm`]
/// does, because a dropped owner may still have services running.
pub(crate) struct KillerTimer {
    key: Key,
    killer: Arc<dyn Killer>,
    end: EndSignal,
    state: Mutex<State>,
    /// Where a change the clock must see at once is sent.
    clock: mpsc::UnboundedSender<Arc<KillerTimer>>,
    /// The clock's count of timers not done.
    armed: Arc<LiveCount>,
}

struct State {
    /// The deadline in force; `None` once disarmed.
    deadline: Option<Instant>,
    /// The deadline the clock's entry is due at (`None` before the clock
    /// first looks).
    sleeping_until: Option<Instant>,
    /// A deadline that had passed, while armed, when a change came: the
    /// clock fires at it whatever the change (a disarm or a renewal that
    /// comes late does not undo a passed deadline).
    passed: Option<Instant>,
    /// The timer's entry in the clock's queue, while it has one (only the
    /// clock reads or writes it).
    entry: Option<delay_queue::Key>,
    /// Fired or disarmed, and out of the clock for good.
    done: bool,
}

impl KillerTimer {
    /// Arms a timer at `basis + after`, kept by `clock`.
    pub(crate) fn start(
        key: Key,
        killer: Arc<dyn Killer>,
        end: EndSignal,
        clock: &KillerClock,
        basis: Instant,
        after: Duration,
    ) -> Arc<Self> {
        let deadline = basis + after;
        killer.armed(&ArmEvent {
            key: key.clone(),
            reason: ArmReason::Acquired,
            basis,
            requested: Some(deadline),
            deadline: Some(deadline),
        });
        let (sender, armed) = clock.sender();
        armed.enter();
        let timer = Arc::new(KillerTimer {
            key,
            killer,
            end,
            state: Mutex::new(State {
                deadline: Some(deadline),
                sleeping_until: None,
                passed: None,
                entry: None,
                done: false,
            }),
            clock: sender,
            armed,
        });
        if timer.clock.send(timer.clone()).is_err() {
            // no clock (its elections were cleaned up): nothing keeps the
            // deadline, so the work must not start under it
            timer.fire_now(deadline);
        }
        timer
    }

    fn state(&self) -> MutexGuard<'_, State> {
        // Every critical section leaves the state whole.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sets the deadline to `basis + after` after a successful write whose
    /// answer came at `answered`; returns the deadline it replaced. A
    /// deadline that had passed by `answered` still fires: the answer came
    /// too late. One that passes after it does not: the write that renews
    /// it was answered before it.
    pub(crate) fn renewed(
        self: &Arc<Self>,
        basis: Instant,
        after: Duration,
        answered: Instant,
    ) -> Option<Instant> {
        self.change(
            ArmReason::Renewed,
            basis,
            Some(basis + after),
            answered,
            |_, req| req,
        )
    }

    /// Caps the deadline at `basis + after` before a renewal attempt that
    /// starts at `basis`, read from the clock just before.
    pub(crate) fn cap(self: &Arc<Self>, basis: Instant, after: Duration) {
        let _ = self.change(
            ArmReason::BeforeRenewal,
            basis,
            Some(basis + after),
            basis,
            |cur, req| match (cur, req) {
                (Some(c), Some(r)) => Some(c.min(r)),
                (c, r) => c.or(r),
            },
        );
    }

    /// The deadline in force; `None` when disarmed.
    pub(crate) fn deadline(&self) -> Option<Instant> {
        self.state().deadline
    }

    /// Disarms the deadline: the owner released the leadership.
    pub(crate) fn disarm(self: &Arc<Self>) {
        let now = Instant::now();
        let _ = self.change(ArmReason::Disarmed, now, None, now, |_, _| None);
    }

    fn change(
        self: &Arc<Self>,
        reason: ArmReason,
        basis: Instant,
        requested: Option<Instant>,
        now: Instant,
        merge: impl FnOnce(Option<Instant>, Option<Instant>) -> Option<Instant>,
    ) -> Option<Instant> {
        let mut state = self.state();
        let before = state.deadline;
        if state.passed.is_none() {
            state.passed = state.deadline.filter(|d| *d <= now);
        }
        let deadline = merge(state.deadline, requested);
        state.deadline = deadline;
        // the clock looks again when the entry is due: tell it at once only
        // if that is too late (after a kill no one looks: the send is moot)
        let tell = !state.done
            && (state.passed.is_some()
                || match (deadline, state.sleeping_until) {
                    (None, _) => true,
                    (Some(d), Some(sleeping)) => d < sleeping,
                    (Some(_), None) => false,
                });
        let orphan = tell && self.clock.send(self.clone()).is_err();
        // the event under the lock: events are in the order of the changes
        if self.killer.observes_arming() {
            self.killer.armed(&ArmEvent {
                key: self.key.clone(),
                reason,
                basis,
                requested,
                deadline,
            });
        }
        drop(state);
        if orphan {
            // the clock has ended (only after cleanup, which disarmed every
            // timer it knew): nothing can keep this deadline any more
            tracing::warn!(key = %self.key, "killer clock gone; deciding here");
            self.orphaned();
        }
        before
    }

    /// No clock can look at this timer: a disarmed one is done, one with a
    /// deadline fires now (nothing would keep it).
    fn orphaned(&self) {
        let (passed, deadline) = {
            let state = self.state();
            (state.passed, state.deadline)
        };
        match passed.or(deadline) {
            Some(deadline) => self.fire_now(deadline),
            None => {
                let mut state = self.state();
                if !std::mem::replace(&mut state.done, true) {
                    drop(state);
                    self.armed.leave();
                }
            }
        }
    }

    /// Fires at `deadline` now (no clock could keep it).
    fn fire_now(&self, deadline: Instant) {
        let mut state = self.state();
        if std::mem::replace(&mut state.done, true) {
            return;
        }
        drop(state);
        self.armed.leave();
        fire(&self.key, &*self.killer, &self.end, deadline);
    }
}

/// The deadline passed: kill first, then record the leadership as
/// [`EndReason::Expired`] (unless it had already ended) and count it.
fn fire(key: &Key, killer: &dyn Killer, end: &EndSignal, deadline: Instant) {
    killer.kill(key, deadline);
    crate::telemetry::killer_fired(key);
    if end.end(EndReason::Expired) {
        crate::telemetry::lost(key, &EndReason::Expired);
    }
}

/// The clock of one [`Elections`](crate::Elections): its task starts with
/// the first leadership.
pub(crate) struct KillerClock {
    inbox: OnceLock<mpsc::UnboundedSender<Arc<KillerTimer>>>,
    armed: Arc<LiveCount>,
    /// The task ends once this is cancelled and no timer is armed.
    closing: CancellationToken,
    tracker: TaskTracker,
}

impl KillerClock {
    pub(crate) fn new() -> Self {
        KillerClock {
            inbox: OnceLock::new(),
            armed: Arc::new(LiveCount::default()),
            closing: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    fn sender(&self) -> (mpsc::UnboundedSender<Arc<KillerTimer>>, Arc<LiveCount>) {
        let sender = self.inbox.get_or_init(|| {
            let (sender, inbox) = mpsc::unbounded_channel();
            let task = Clock {
                inbox,
                queue: DelayQueue::new(),
                armed: self.armed.clone(),
                closing: self.closing.clone(),
            };
            self.tracker
                .spawn(task.run().instrument(tracing::debug_span!("killer_clock")));
            sender
        });
        (sender.clone(), self.armed.clone())
    }

    /// Timers armed (each a leadership's killer deadline, kept until it
    /// fires or is disarmed).
    pub(crate) fn armed(&self) -> usize {
        self.armed.get()
    }

    /// Waits until no timer is armed, then ends the task.
    pub(crate) async fn shut_down(&self) {
        self.armed.idle().await;
        self.closing.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// Dropped with its elections: the task goes on until the last armed
/// timer fires or is disarmed.
impl Drop for KillerClock {
    fn drop(&mut self) {
        self.closing.cancel();
    }
}

/// The clock's task.
struct Clock {
    inbox: mpsc::UnboundedReceiver<Arc<KillerTimer>>,
    queue: DelayQueue<Arc<KillerTimer>>,
    armed: Arc<LiveCount>,
    closing: CancellationToken,
}

impl Clock {
    async fn run(mut self) {
        let closing = self.closing.clone();
        let mut closing = pin!(closing.cancelled());
        let mut closed = false;
        loop {
            if closed && self.armed.get() == 0 {
                return;
            }
            // What is ready is taken a bounded amount at a time, the timers
            // sent in as well as the deadlines that came, and the task
            // yields between two helpings: neither starves the other, and
            // no other task waits long for this one.
            let mut busy = false;
            for _ in 0..SLICE {
                match self.inbox.try_recv() {
                    Ok(timer) => {
                        self.look(timer);
                        busy = true;
                    }
                    Err(_) => break,
                }
            }
            for _ in 0..SLICE {
                // polled again with the task's waker by the select below
                // before the task sleeps
                match self.queue.next().now_or_never() {
                    Some(Some(expired)) => {
                        self.expired(expired.into_inner());
                        busy = true;
                    }
                    _ => break,
                }
            }
            if busy {
                tokio::task::yield_now().await;
                continue;
            }
            tokio::select! {
                biased;
                Some(expired) = self.queue.next(), if !self.queue.is_empty() => {
                    self.expired(expired.into_inner());
                }
                Some(timer) = self.inbox.recv() => self.look(timer),
                () = &mut closing, if !closed => closed = true,
                else => return,
            }
        }
    }

    /// The entry of `timer` came due.
    fn expired(&mut self, timer: Arc<KillerTimer>) {
        timer.state().entry = None;
        self.look(timer);
    }

    /// Looks at `timer`: fires it, drops it (disarmed), or keeps its entry
    /// due at its deadline.
    fn look(&mut self, timer: Arc<KillerTimer>) {
        let mut state = timer.state();
        if state.done {
            return;
        }
        let fire_at = match (state.passed, state.deadline) {
            (Some(passed), _) => Some(passed),
            (None, None) => None,
            (None, Some(deadline)) if deadline <= Instant::now() => Some(deadline),
            (None, Some(deadline)) => {
                match state.entry {
                    Some(entry) if state.sleeping_until != Some(deadline) => {
                        self.queue.reset_at(&entry, deadline);
                    }
                    Some(_) => {}
                    None => state.entry = Some(self.queue.insert_at(timer.clone(), deadline)),
                }
                state.sleeping_until = Some(deadline);
                return;
            }
        };
        // fired or disarmed: out of the clock for good
        if let Some(entry) = state.entry.take() {
            self.queue.remove(&entry);
        }
        state.done = true;
        drop(state);
        self.armed.leave();
        match fire_at {
            Some(deadline) => fire(&timer.key, &*timer.killer, &timer.end, deadline),
            None => tracing::debug!(key = %timer.key, "killer disarmed"),
        }
    }
}
