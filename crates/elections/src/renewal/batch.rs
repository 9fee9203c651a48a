//! The renewal scheduler: a few tasks renew every leadership of one
//! [`Elections`](crate::Elections).
//!
//! A task per leadership costs a task wake-up, a timer and a cancellation
//! waiter per renewal; at a million leaderships that was most of the
//! process's CPU. Here each leadership is a [`Job`] in the timer queue of
//! one of a few *shards* (one per core, up to [`MAX_SHARDS`]), each a task
//! that:
//!
//! - takes the jobs that are due from its queue and starts their first
//!   attempt ([`Renewal::attempt`]), all in flight together;
//! - for a clean success, moves the killer's deadline and puts the job back
//!   in the queue, due `d/4` after the write's start;
//! - for anything else (an error, an unknown outcome, a lost record, a
//!   shared claim to refresh) hands the job to a task of its own that
//!   finishes the round exactly as before ([`Renewal::finish_round`]) and
//!   gives it back to the shard once renewed.
//!
//! The killer keeps its own task per leadership ([`crate::killer`]): it must
//! fire even when every shard is stuck.
//!
//! **Nothing renews after a release.** The owner's release cancels the
//! job's stop token and then waits ([`RenewalHandle::stopped`]) until no
//! attempt of the job is in flight: a job waiting in a queue is marked done
//! there and then (and dropped when it comes due); an attempt in flight
//! returns at once on the stop (or with the store's answer, if it came at
//! the same time); a round being finished by its own task returns at the
//! next wait. Only after that does the release disarm the killer and
//! delete the record, as with the task per leadership.

use std::{
    collections::BTreeMap,
    pin::{Pin, pin},
    sync::{
        Arc, OnceLock,
        atomic::{AtomicBool, AtomicU8, AtomicUsize, Ordering},
    },
    time::Duration,
};

use futures::{FutureExt, StreamExt, stream::FuturesUnordered};
use tokio::{
    sync::{Notify, mpsc},
    time::Instant,
};
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use tracing::Instrument;

use super::{Attempt, Renewal, Round};
use crate::live_count::LiveCount;

/// At most this many shard tasks per [`Elections`](crate::Elections).
pub(crate) const MAX_SHARDS: usize = 8;

/// Rounds are started on ticks this far apart (a round due between two
/// ticks starts at the next one, at most this late): a shard wakes once
/// per tick, not once per millisecond in which a round is due. The killer
/// deadline counts from the write's start, so a later start only moves it
/// later; at the shortest lease (1 s, rounds every 250 ms) this is 4 % of
/// the interval.
const TICK: Duration = Duration::from_millis(10);

/// Jobs a shard takes from its inbox, and rounds it starts, before it
/// yields to the other tasks.
const SLICE: usize = 1024;

/// Rounds a shard starts on one reading of the clock, at most: the reading
/// is their start, a little early for the last (about 0.1 ms on
/// storage-mem).
const BURST: usize = 64;

/// The job waits in a shard's queue.
const QUEUED: u8 = 0;
/// An attempt of the job is in flight (in a shard or its own task).
const IN_FLIGHT: u8 = 1;
/// The job has ended: stopped, lost, or dropped.
const DONE: u8 = 2;

/// What a job and its owner's [`RenewalHandle`] share.
struct JobState {
    /// [`QUEUED`], [`IN_FLIGHT`] or [`DONE`].
    phase: AtomicU8,
    /// Told every time an attempt stops being in flight.
    changed: Notify,
    /// The renewer's count of jobs not done.
    live: Arc<LiveCount>,
    /// Set by the owner's release before it cancels the renewal's stop
    /// token: what the shards look at (a token's check takes a lock).
    stopping: AtomicBool,
}

impl JobState {
    /// Marks the job done; true if this call did it (it counts the job out).
    fn finish(&self) -> bool {
        if self.phase.swap(DONE, Ordering::SeqCst) == DONE {
            return false;
        }
        self.live.leave();
        self.changed.notify_waiters();
        true
    }
}

/// One leadership's renewal, wherever it is (a queue, an attempt in
/// flight, a task finishing a round). Dropped anywhere, it is done.
struct Job {
    renewal: Box<Renewal>,
    state: Arc<JobState>,
}

impl Drop for Job {
    fn drop(&mut self) {
        self.state.finish();
    }
}

/// The owner's side of a job, kept in the elections' entry.
pub(crate) struct RenewalHandle {
    state: Arc<JobState>,
    /// The renewal's stop token (its own waits select on it).
    stop: CancellationToken,
}

impl RenewalHandle {
    /// Stops the renewal: no attempt starts after this, and one in flight
    /// returns at once (see [`RenewalHandle::stopped`] to wait for it).
    pub(crate) fn stop(&self) {
        self.state.stopping.store(true, Ordering::SeqCst);
        self.stop.cancel();
    }

    /// After the job's stop token was cancelled: returns once no attempt
    /// of it is in flight, and none will start.
    pub(crate) async fn stopped(&self) {
        loop {
            let mut changed = pin!(self.state.changed.notified());
            changed.as_mut().enable();
            match self.state.phase.load(Ordering::SeqCst) {
                DONE => return,
                QUEUED => {
                    if self.abandon() {
                        return;
                    }
                }
                _ => changed.await,
            }
        }
    }

    /// After the job's stop token was cancelled: ends the job now if it
    /// waits in a queue (true then). One in flight ends on the stop.
    pub(crate) fn abandon(&self) -> bool {
        let done = self
            .state
            .phase
            .compare_exchange(QUEUED, DONE, Ordering::SeqCst, Ordering::SeqCst)
            .is_ok();
        if done {
            self.state.live.leave();
        }
        done
    }
}

type InFlight = Pin<Box<dyn Future<Output = (Job, Attempt)> + Send>>;

/// The shards of one [`Elections`](crate::Elections), started on its first
/// leadership.
pub(crate) struct Renewer {
    shards: OnceLock<Vec<mpsc::UnboundedSender<Job>>>,
    /// The shard the next job goes to.
    next: AtomicUsize,
    /// Jobs not done.
    live: Arc<LiveCount>,
    /// Ends the shards ([`Renewer::shut_down`]).
    shutdown: CancellationToken,
    /// The shards and the tasks finishing rounds.
    tracker: TaskTracker,
}

impl Renewer {
    pub(crate) fn new() -> Self {
        Renewer {
            shards: OnceLock::new(),
            next: AtomicUsize::new(0),
            live: Arc::new(LiveCount::default()),
            shutdown: CancellationToken::new(),
            tracker: TaskTracker::new(),
        }
    }

    /// Renews `renewal` from now on (its first round is due `d/4` after
    /// its lease's start); `stop` is its stop token. Call within the
    /// runtime.
    pub(crate) fn start(&self, renewal: Renewal, stop: CancellationToken) -> RenewalHandle {
        let state = Arc::new(JobState {
            phase: AtomicU8::new(QUEUED),
            changed: Notify::new(),
            live: self.live.clone(),
            stopping: AtomicBool::new(false),
        });
        self.live.enter();
        let job = Job {
            renewal: Box::new(renewal),
            state: state.clone(),
        };
        let shards = self.shards.get_or_init(|| self.spawn_shards());
        let index = self.next.fetch_add(1, Ordering::Relaxed) % shards.len().max(1);
        if let Some(shard) = shards.get(index)
            && let Err(mpsc::error::SendError(job)) = shard.send(job)
        {
            // the shard has ended (after cleanup): the job is done
            drop(job);
        }
        RenewalHandle { state, stop }
    }

    fn spawn_shards(&self) -> Vec<mpsc::UnboundedSender<Job>> {
        let count = std::thread::available_parallelism()
            .map_or(1, std::num::NonZero::get)
            .clamp(1, MAX_SHARDS);
        let base = Instant::now();
        (0..count)
            .map(|index| {
                let (sender, inbox) = mpsc::unbounded_channel();
                let shard = Shard {
                    inbox,
                    back: sender.downgrade(),
                    shutdown: self.shutdown.clone(),
                    tracker: self.tracker.clone(),
                    // the shards' ticks interleave, so they do not all
                    // wake (and contend for the store) at once
                    epoch: base + TICK.mul_f64(index as f64 / count as f64),
                };
                let span = tracing::debug_span!("renewal_shard", index);
                self.tracker.spawn(shard.run().instrument(span));
                sender
            })
            .collect()
    }

    /// Renewals not ended (each a leadership's renewal, wherever it is).
    pub(crate) fn live(&self) -> usize {
        self.live.get()
    }

    /// After cleanup released every leadership: waits until every job has
    /// ended (a release still waiting for its work keeps its renewal going
    /// until then), then ends the shards and waits for them and for every
    /// task finishing a round.
    pub(crate) async fn shut_down(&self) {
        self.live.idle().await;
        self.shutdown.cancel();
        self.tracker.close();
        self.tracker.wait().await;
    }
}

/// One shard: a queue of jobs by due time and their attempts in flight.
struct Shard {
    inbox: mpsc::UnboundedReceiver<Job>,
    /// Where a finished slow round sends its job back.
    back: mpsc::WeakUnboundedSender<Job>,
    shutdown: CancellationToken,
    tracker: TaskTracker,
    /// What the ticks count from.
    epoch: Instant,
}

/// A shard's jobs by the tick their next round is due at.
#[derive(Default)]
struct Wheel {
    ticks: BTreeMap<Instant, Vec<Job>>,
}

impl Wheel {
    fn insert(&mut self, tick: Instant, job: Job) {
        self.ticks.entry(tick).or_default().push(job);
    }

    fn is_empty(&self) -> bool {
        self.ticks.is_empty()
    }

    fn next_tick(&self) -> Option<Instant> {
        self.ticks.first_key_value().map(|(tick, _)| *tick)
    }

    /// Up to `max` jobs of the first tick, if it has come by `now`.
    fn take_due(&mut self, now: Instant, max: usize) -> Option<Vec<Job>> {
        let mut first = self.ticks.first_entry()?;
        if *first.key() > now {
            return None;
        }
        let jobs = first.get_mut();
        if jobs.len() > max {
            let keep = jobs.len() - max;
            return Some(jobs.split_off(keep));
        }
        Some(first.remove())
    }
}

impl Shard {
    async fn run(mut self) {
        let mut wheel = Wheel::default();
        let mut in_flight: FuturesUnordered<InFlight> = FuturesUnordered::new();
        let mut open = true;
        let shutdown = self.shutdown.clone();
        let mut shutdown = pin!(shutdown.cancelled());
        // one timer for the shard, set to the first tick that has jobs
        let mut timer = pin!(tokio::time::sleep_until(self.epoch));
        loop {
            if !open && wheel.is_empty() && in_flight.is_empty() {
                // every elections handle is gone and every job has ended
                return;
            }
            // Work that is ready is taken a bounded amount at a time, the
            // new jobs first, and the task yields between two helpings: an
            // overloaded shard neither leaves new leaderships unscheduled
            // nor keeps the killer clock (another task) from running.
            if self.shutdown.is_cancelled() {
                return;
            }
            let mut busy = false;
            for _ in 0..SLICE {
                // answers polled again with the task's waker by the select
                // below before the task sleeps
                match in_flight.next().now_or_never() {
                    Some(Some((job, attempt))) => {
                        self.attempted(job, attempt, &mut wheel);
                        busy = true;
                    }
                    _ => break,
                }
            }
            for _ in 0..SLICE {
                match self.inbox.try_recv() {
                    Ok(job) => {
                        let tick = self.tick(job.renewal.due());
                        wheel.insert(tick, job);
                        busy = true;
                    }
                    Err(mpsc::error::TryRecvError::Empty) => break,
                    Err(mpsc::error::TryRecvError::Disconnected) => {
                        open = false;
                        break;
                    }
                }
            }
            let now = Instant::now();
            let mut left = SLICE;
            while left > 0
                && let Some(due) = wheel.take_due(now, left)
            {
                left -= due.len();
                self.launch_all(due, &mut wheel, &mut in_flight);
                busy = true;
            }
            if busy {
                tokio::task::yield_now().await;
                continue;
            }
            if let Some(tick) = wheel.next_tick()
                && timer.deadline() != tick
            {
                timer.as_mut().reset(tick);
            }
            tokio::select! {
                biased;
                () = &mut shutdown => return,
                Some((job, attempt)) = in_flight.next(), if !in_flight.is_empty() => {
                    self.attempted(job, attempt, &mut wheel);
                }
                () = &mut timer, if !wheel.is_empty() => {}
                received = self.inbox.recv(), if open => match received {
                    Some(job) => {
                        let tick = self.tick(job.renewal.due());
                        wheel.insert(tick, job);
                    }
                    None => open = false,
                },
            }
        }
    }

    /// Starts the rounds of `due`: they start on one clock reading per
    /// [`BURST`] (a start read a little early only makes the lease and the
    /// killer count from earlier).
    fn launch_all(
        &self,
        due: Vec<Job>,
        wheel: &mut Wheel,
        in_flight: &mut FuturesUnordered<InFlight>,
    ) {
        let mut start = Instant::now();
        for (index, job) in due.into_iter().enumerate() {
            if index > 0 && index % BURST == 0 {
                start = Instant::now();
            }
            self.launch(job, start, wheel, in_flight);
        }
    }

    /// A job came due: its first attempt, unless it was stopped meanwhile.
    /// The first tick at or after `due`.
    fn tick(&self, due: Instant) -> Instant {
        let since = due.saturating_duration_since(self.epoch);
        let tick = TICK.as_nanos();
        let ticks = since.as_nanos().div_ceil(tick);
        let rounded = u64::try_from(ticks * tick).unwrap_or(u64::MAX);
        self.epoch + Duration::from_nanos(rounded)
    }

    fn launch(
        &self,
        job: Job,
        start: Instant,
        wheel: &mut Wheel,
        in_flight: &mut FuturesUnordered<InFlight>,
    ) {
        if job
            .state
            .phase
            .compare_exchange(QUEUED, IN_FLIGHT, Ordering::SeqCst, Ordering::SeqCst)
            .is_err()
            || job.state.stopping.load(Ordering::SeqCst)
        {
            // released while queued (the release waits for nothing then),
            // or stopping: dropped, the job is done
            return;
        }
        let mut attempt: InFlight = Box::pin(async move {
            let attempt = job.renewal.attempt_from(start).await;
            (job, attempt)
        });
        // a store that answers at once (storage-mem) is done here: no
        // waker, no trip through the set
        match attempt.as_mut().now_or_never() {
            Some((job, attempt)) => self.attempted(job, attempt, wheel),
            None => in_flight.push(attempt),
        }
    }

    /// A first attempt answered: a clean success goes back to the queue,
    /// anything else is finished by a task of its own.
    fn attempted(&self, mut job: Job, attempt: Attempt, wheel: &mut Wheel) {
        let due = job.renewal.due();
        let Some((start, now)) = job.renewal.completed(&attempt) else {
            self.finish_elsewhere(job, attempt, due);
            return;
        };
        job.renewal.round_finished(due, now);
        job.renewal.renewed(start, now);
        requeue(job, |job| {
            let tick = self.tick(job.renewal.due());
            wheel.insert(tick, job);
        });
    }

    /// Finishes the round of `job` on a task of its own
    /// ([`Renewal::finish_round`]); renewed, the job comes back.
    fn finish_elsewhere(&self, job: Job, first: Attempt, due: Instant) {
        let back = self.back.clone();
        let span = job.renewal.span.clone();
        self.tracker.spawn(
            async move {
                let mut job = job;
                let round = job.renewal.finish_round(first).await;
                let now = Instant::now();
                job.renewal.round_finished(due, now);
                match round {
                    Round::Renewed(start) => {
                        job.renewal.renewed(start, now);
                        requeue(job, |job| {
                            if let Some(back) = back.upgrade() {
                                // a shard that has ended drops the job: done
                                let _ = back.send(job);
                            }
                        });
                    }
                    Round::Lost(reason) => job.renewal.lost(reason),
                    Round::Stopped => {}
                }
            }
            .instrument(span),
        );
    }
}

/// The attempt is no longer in flight: the job waits for its next round
/// (`enqueue`), unless it was stopped meanwhile (then it is done).
fn requeue(job: Job, enqueue: impl FnOnce(Job)) {
    job.state.phase.store(QUEUED, Ordering::SeqCst);
    if job.state.stopping.load(Ordering::SeqCst) {
        // A release may wait for this attempt: it set `stopping` before it
        // read the phase, so it saw the attempt in flight and waits to be
        // told, or saw it queued and needs nothing. (Both sides are
        // sequentially consistent: one of them sees the other.)
        job.state.changed.notify_waiters();
        return;
    }
    enqueue(job);
}
