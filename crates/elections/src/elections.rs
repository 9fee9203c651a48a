//! [`Elections`]: acquire, renew, release.

use std::{
    collections::HashMap,
    fmt,
    sync::{
        Arc, Mutex, MutexGuard, PoisonError,
        atomic::{AtomicU32, Ordering},
    },
    time::Duration,
};

use tokio::time::Instant;
use tokio_util::{sync::CancellationToken, task::TaskTracker};
use ttl_storage::{Key, TtlStorage};

mod acquire;
mod release;

use crate::{
    ElectionsError,
    claim::SharedClaim,
    end::{EndReason, EndSignal},
    killer::{Killer, KillerClock, KillerTimer, ProcessKiller},
    leadership::Leadership,
    renewal::{
        Renewal,
        batch::{RenewalHandle, Renewer},
    },
    telemetry,
    timing::Timing,
};

/// Leader election over a [`TtlStorage`] (Go's `IElections`).
///
/// One instance per process is typical; it may hold leadership of many keys
/// at once. Cheap to clone: clones share state.
///
/// Ending: call [`Leadership::release`] (or [`release_leadership`](Self::release_leadership))
/// once the work done as leader has stopped, and [`cleanup`](Self::cleanup)
/// before the process exits. Dropping is safe and has one outcome: every
/// [`Leadership`] handle keeps its elections alive, so nothing changes while
/// a handle exists; once the last clone and the last handle are gone, each
/// leadership still held ends as lost ([`EndReason::ElectionsDropped`]):
/// renewal stops, the killer is disarmed (nothing is left that could release
/// the key, so the work is taken to have stopped), and the record is left to
/// expire rather than deleted.
///
/// See the [crate documentation](crate) for the protocol and its guarantees.
#[derive(Clone)]
pub struct Elections {
    inner: Arc<Inner>,
}

struct Inner {
    storage: Arc<dyn TtlStorage>,
    killer: Arc<dyn Killer>,
    /// Random id of this instance: the first half of every record nonce.
    instance: u64,
    acquisitions: AtomicU32,
    tracker: TaskTracker,
    state: Mutex<State>,
    /// Renewal lag, and whether new acquisitions are shed ([`crate::load`]).
    load: Arc<crate::load::Load>,
    /// The tasks renewing every leadership ([`crate::renewal::batch`]).
    renewer: Renewer,
    /// The task keeping every killer deadline ([`crate::killer`]).
    clock: KillerClock,
}

#[derive(Default)]
struct State {
    finalized: bool,
    slots: HashMap<Key, Slot>,
}

enum Slot {
    Acquiring,
    Held(Entry),
}

pub(crate) struct Entry {
    /// The stored bytes (value and nonce).
    pub(crate) record: Arc<[u8]>,
    pub(crate) timing: Timing,
    /// The renewal's owner side: stops it, waits for its attempt.
    renewal: RenewalHandle,
    pub(crate) killer: Arc<KillerTimer>,
    pub(crate) end: EndSignal,
    /// The owner's tracked work ([`Leadership::spawn`]): a release waits
    /// for it before it disarms the killer.
    work: TaskTracker,
}

/// An entry dropped before its release finished (the release or hand-over
/// future was cancelled) stops renewal: nothing is left that could release
/// it. The killer stays armed, since the work may still run.
impl Drop for Entry {
    fn drop(&mut self) {
        self.renewal.stop();
        self.renewal.abandon();
    }
}

impl Entry {
    /// After the end signal fired: waits for the tracked work (renewal
    /// goes on meanwhile), then stops renewal and waits for its task.
    pub(crate) async fn stop_work_and_renewal(&mut self) {
        self.work.close();
        if !self.work.is_empty() {
            tracing::info!(
                tasks = self.work.len(),
                "waiting for the leadership's tracked work to stop; the killer stays armed"
            );
        }
        self.work.wait().await;
        self.renewal.stop();
        self.renewal.stopped().await;
    }
}

impl Elections {
    /// Elections over `storage` with the production killer ([`ProcessKiller`]),
    /// which exits the process if a lost leadership is not released in time.
    pub fn new(storage: impl TtlStorage + 'static) -> Self {
        Self::builder(storage).build()
    }

    /// Elections over `storage` with a custom killer (tests use
    /// [`crate::RecordingKiller`]).
    pub fn with_killer(storage: impl TtlStorage + 'static, killer: Arc<dyn Killer>) -> Self {
        Self::builder(storage).killer(killer).build()
    }

    /// How late this instance's renewal rounds have finished, and how many
    /// acquisitions were shed because of it ([`crate::load`]): a process's
    /// own view of whether it holds more than it can renew.
    pub fn renewal_lag(&self) -> crate::load::RenewalLag {
        self.inner.load.report()
    }

    /// A builder, for the less common options.
    pub fn builder(storage: impl TtlStorage + 'static) -> ElectionsBuilder {
        ElectionsBuilder {
            storage: Arc::new(storage),
            killer: Arc::new(ProcessKiller),
            instance: None,
        }
    }

    /// Tries once to become the leader for `key`.
    ///
    /// Returns `Ok(Some(leadership))` when this call acquired it, `Ok(None)`
    /// when someone else holds it. `value` (this contender's address, say)
    /// is written to the record followed by a unique nonce (see
    /// [`crate::record`]), so every leadership's record bytes are unique.
    /// `duration` is the lease (a whole number of seconds, at least 1 s).
    ///
    /// The protocol: insert-if-not-exists; advance the fencing counter; a
    /// confirming compare-and-swap whose start begins the lease and arms the
    /// killer at `0.8 x duration`; then the elections' renewal tasks renew
    /// it every `duration / 4` (on the next 10 ms tick).
    ///
    /// Cancelling this future part-way may leave a record that no one renews;
    /// it expires after `duration`.
    ///
    /// # Errors
    ///
    /// [`ElectionsError::Finalized`] after [`cleanup`](Self::cleanup),
    /// [`ElectionsError::AlreadyHeld`] if this instance holds or is acquiring
    /// `key`, validation errors, and storage errors the protocol could not
    /// resolve (nothing is held then).
    pub async fn acquire_leadership(
        &self,
        key: &Key,
        value: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<Option<Leadership>, ElectionsError> {
        self.acquire_from(key, value.as_ref(), duration, None, None)
            .await
    }

    async fn install(
        &self,
        reservation: Reservation<'_>,
        value: Arc<[u8]>,
        timing: Timing,
        fencing_token: u64,
        lease_start: Instant,
        claim: Option<SharedClaim>,
    ) -> Result<Option<Leadership>, ElectionsError> {
        let key = reservation.key.clone();
        {
            let mut state = self.inner.lock();
            if !state.finalized {
                let end = EndSignal::default();
                let stop = CancellationToken::new();
                let killer = KillerTimer::start(
                    key.clone(),
                    self.inner.killer.clone(),
                    end.clone(),
                    &self.inner.clock,
                    lease_start,
                    timing.kill_after_success(),
                );
                let renewal = Renewal {
                    storage: self.inner.storage.clone(),
                    key: key.clone(),
                    value: value.clone(),
                    timing,
                    killer: killer.clone(),
                    end: end.clone(),
                    stop: stop.clone(),
                    lease_start,
                    claim,
                    load: self.inner.load.clone(),
                    metrics: crate::telemetry::RenewalMetrics::new(&key),
                    renewals: 0,
                    span: tracing::info_span!("leadership", %key, fencing_token),
                    arming_observed: self.inner.killer.observes_arming(),
                };
                let renewal = self.inner.renewer.start(renewal, stop);
                let work = TaskTracker::new();
                let killer_handle = killer.clone();
                state.slots.insert(
                    key.clone(),
                    Slot::Held(Entry {
                        record: value.clone(),
                        timing,
                        renewal,
                        killer: killer.clone(),
                        end: end.clone(),
                        work: work.clone(),
                    }),
                );
                reservation.fulfil();
                telemetry::attempt(&key, "acquired");
                telemetry::acquired(&key);
                return Ok(Some(Leadership {
                    key,
                    record: value,
                    fencing_token,
                    duration: timing.duration(),
                    end,
                    work,
                    killer: killer_handle,
                    owner: self.clone(),
                }));
            }
        }
        // cleanup() ran while we were acquiring: give the record back.
        drop(reservation);
        self.withdraw_record(&key, &value, timing).await;
        Err(ElectionsError::Finalized)
    }

    /// Refuses new acquisitions from now on, releases every leadership this
    /// instance holds (see [`release_leadership`](Self::release_leadership))
    /// and waits until every background task (renewals, killers) has ended.
    ///
    /// Safe to call while a renewal is itself failing or losing leadership:
    /// renewal tasks never take the lock `cleanup` takes. Idempotent.
    pub async fn cleanup(&self) {
        let entries: Vec<(Key, Entry)> = {
            let mut state = self.inner.lock();
            state.finalized = true;
            let held: Vec<Key> = state
                .slots
                .iter()
                .filter(|(_, slot)| matches!(slot, Slot::Held(_)))
                .map(|(key, _)| key.clone())
                .collect();
            held.into_iter()
                .filter_map(|key| match state.slots.remove(&key) {
                    Some(Slot::Held(entry)) => Some((key, entry)),
                    _ => None,
                })
                .collect()
        };
        for (key, entry) in entries {
            self.release_entry(&key, entry).await;
        }
        self.inner.renewer.shut_down().await;
        self.inner.clock.shut_down().await;
        self.inner.tracker.close();
        self.inner.tracker.wait().await;
    }

    /// True once [`cleanup`](Self::cleanup) has been called.
    pub fn is_finalized(&self) -> bool {
        self.inner.lock().finalized
    }

    /// Keys this instance currently holds (including lost, unreleased ones).
    pub fn held_keys(&self) -> Vec<Key> {
        self.inner
            .lock()
            .slots
            .iter()
            .filter(|(_, slot)| matches!(slot, Slot::Held(_)))
            .map(|(key, _)| key.clone())
            .collect()
    }

    /// The call timeout of leadership duration `duration` (a quarter of
    /// it; 1 s for a duration that is not a valid one).
    pub(crate) fn timing_of(&self, duration: Duration) -> Duration {
        Timing::new(duration).map_or(Duration::from_secs(1), |t| t.call_timeout())
    }

    /// The next record nonce of this instance: its id and a fresh counter.
    pub(crate) fn next_nonce(&self) -> (u64, u32) {
        (
            self.inner.instance,
            self.inner.acquisitions.fetch_add(1, Ordering::Relaxed),
        )
    }

    /// The storage these elections run on.
    pub(crate) fn inner_storage(&self) -> Arc<dyn TtlStorage> {
        self.inner.storage.clone()
    }

    /// This instance's id as it appears in record nonces and candidate ids
    /// (16 hex digits).
    pub(crate) fn instance_hex(&self) -> String {
        format!("{:016x}", self.inner.instance)
    }

    /// Runs `task` in the background; [`cleanup`](Self::cleanup) waits for it.
    pub(crate) fn spawn_background(&self, task: impl Future<Output = ()> + Send + 'static) {
        self.inner.tracker.spawn(task);
    }

    /// Background work still running: a renewal and a killer timer per
    /// leadership not yet released, and the elections' own helpers.
    /// Renewals and killer timers are not tasks of their own (a few
    /// shared tasks run them all: a few renewal shards and one killer clock);
    /// each is counted as one.
    pub fn background_tasks(&self) -> usize {
        self.inner.tracker.len() + self.inner.renewer.live() + self.inner.clock.armed()
    }
}

/// Builds an [`Elections`] with non-default options.
pub struct ElectionsBuilder {
    storage: Arc<dyn TtlStorage>,
    killer: Arc<dyn Killer>,
    instance: Option<u64>,
}

impl ElectionsBuilder {
    /// The killer (default: [`ProcessKiller`]).
    pub fn killer(mut self, killer: Arc<dyn Killer>) -> Self {
        self.killer = killer;
        self
    }

    /// The instance id used in record nonces (default: random). Set it
    /// only for reproducible simulations; two live instances must never
    /// share an id.
    pub fn instance_id(mut self, id: u64) -> Self {
        self.instance = Some(id);
        self
    }

    /// The elections.
    pub fn build(self) -> Elections {
        let instance = self.instance.unwrap_or_else(random_instance_id);
        Elections {
            inner: Arc::new(Inner {
                storage: self.storage,
                killer: self.killer,
                instance,
                acquisitions: AtomicU32::new(0),
                tracker: TaskTracker::new(),
                state: Mutex::new(State::default()),
                load: Arc::new(crate::load::Load::new()),
                renewer: Renewer::new(),
                clock: KillerClock::new(),
            }),
        }
    }
}

/// 64 bits from the operating system's random source (through `rand`).
fn random_instance_id() -> u64 {
    rand::random()
}

impl fmt::Debug for Elections {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Elections")
            .field("held", &self.held_keys())
            .field("background_tasks", &self.background_tasks())
            .finish()
    }
}

impl Inner {
    fn lock(&self) -> MutexGuard<'_, State> {
        // Every critical section is a few map operations that cannot leave
        // the state half-changed, so a poisoned lock is still consistent.
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }
}

/// Runs when the last [`Elections`] clone *and* the last [`Leadership`]
/// handle are gone (every handle keeps its elections alive). Nothing is left
/// that could watch the leadership or release it, so the work done under it
/// is taken to have stopped: renewal stops, cancellation tokens taken from
/// the handles fire with [`EndReason::ElectionsDropped`], the killer is
/// disarmed, and the record is *not* deleted: the key frees when it expires.
impl Drop for Inner {
    fn drop(&mut self) {
        let state = self.state.get_mut().unwrap_or_else(PoisonError::into_inner);
        for (key, slot) in state.slots.drain() {
            if let Slot::Held(entry) = slot {
                tracing::warn!(%key, "elections and every leadership handle dropped without release; renewal stops, the record is left to expire");
                entry.renewal.stop();
                entry.renewal.abandon();
                if entry.end.end(EndReason::ElectionsDropped) {
                    telemetry::lost(&key, &EndReason::ElectionsDropped);
                }
                entry.killer.disarm();
            }
        }
    }
}

/// The `Acquiring` slot of one key; freed on drop unless fulfilled, so a
/// cancelled acquisition does not block the key in this instance.
struct Reservation<'a> {
    inner: &'a Inner,
    key: Key,
    fulfilled: bool,
}

impl<'a> Reservation<'a> {
    fn take(inner: &'a Inner, key: &Key) -> Result<Self, ElectionsError> {
        let mut state = inner.lock();
        if state.finalized {
            return Err(ElectionsError::Finalized);
        }
        if state.slots.contains_key(key) {
            return Err(ElectionsError::AlreadyHeld(key.clone()));
        }
        state.slots.insert(key.clone(), Slot::Acquiring);
        Ok(Reservation {
            inner,
            key: key.clone(),
            fulfilled: false,
        })
    }

    /// The slot now holds the entry; don't free it. Call with the lock held
    /// by the caller's `state` (the slot was replaced there).
    fn fulfil(mut self) {
        self.fulfilled = true;
    }
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        if self.fulfilled {
            return;
        }
        let mut state = self.inner.lock();
        if matches!(state.slots.get(&self.key), Some(Slot::Acquiring)) {
            state.slots.remove(&self.key);
        }
    }
}
