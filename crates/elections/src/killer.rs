//! The killer: the safety net that ends the process if it may still be
//! working after its lease could have expired.
//!
//! # Why a killer
//!
//! A leader learns that it lost its lease only when a renewal fails. If the
//! process is paused (GC, SIGSTOP, an overloaded host) or the storage hangs,
//! it learns nothing while its record expires and another process takes
//! over. The killer is a deadline, kept apart from renewal, that a
//! successful write pushes forward and nothing else does:
//!
//! - after a successful insert or renewal that **started** at `s`, the
//!   deadline becomes `s + 0.8 d`. The record was written no earlier than `s`,
//!   so it lives until at least `s + d` on the storage's clock: the killer
//!   fires `0.2 d` before anyone else can take over, leaving margin for clock
//!   rate differences and the exit itself;
//! - before every renewal attempt starting at `a`, the deadline is capped at
//!   `a + 0.75 d` (the design's pre-CAS arming). It is a *cap*: the design
//!   re-arms here unconditionally, which after two retries would push the
//!   deadline to `1.05 d` after the last success, beyond the lease;
//! - after a **loss** the deadline stays armed: the owner's services may still
//!   be running, and only the owner knows when they have stopped. The owner
//!   then calls [`crate::Elections::release_leadership`], which disarms it;
//! - if the owner does not release in time, [`Killer::kill`] runs. The default
//!   [`ProcessKiller`] logs and exits the process with code 1.
//!
//! Tests inject a [`RecordingKiller`], which records every arming and every
//! kill instead of exiting.
//!
//! The deadlines of every leadership of one [`Elections`](crate::Elections)
//! are kept by one task of their own (the killer clock), apart from the renewal
//! tasks: a renewal stuck on the store does not hold up a killer.

use std::{
    fmt,
    sync::{Arc, Mutex, PoisonError},
};

use tokio::time::Instant;
use ttl_storage::Key;

mod clock;

pub(crate) use clock::{KillerClock, KillerTimer};

/// What to do when a killer deadline passes. Injectable for tests.
pub trait Killer: Send + Sync + 'static {
    /// The deadline of the leadership on `key` has passed while armed: the
    /// process may be acting as leader after its lease could have expired.
    /// The production implementation must end the process.
    fn kill(&self, key: &Key, deadline: Instant);

    /// Observes every change of a deadline (for tests and metrics). The
    /// default does nothing.
    fn armed(&self, _event: &ArmEvent) {}

    /// Whether [`armed`](Killer::armed) looks at the events. A killer that
    /// answers false is not called with them, which spares two events (a
    /// copy of the key each) per renewal. The default is true.
    fn observes_arming(&self) -> bool {
        true
    }
}

/// Why a deadline changed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ArmReason {
    /// Set after the acquisition's confirming write succeeded.
    Acquired,
    /// Capped before a renewal attempt.
    BeforeRenewal,
    /// Set after a successful renewal.
    Renewed,
    /// Disarmed by the owner's release.
    Disarmed,
}

/// One change of a killer deadline.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArmEvent {
    /// The leadership's key.
    pub key: Key,
    /// Why it changed.
    pub reason: ArmReason,
    /// The instant the requested deadline counts from (the start of the write).
    pub basis: Instant,
    /// The deadline asked for (`basis` + 0.8 d or 0.75 d); `None` when disarming.
    pub requested: Option<Instant>,
    /// The deadline in force after the change; `None` when disarmed.
    pub deadline: Option<Instant>,
}

/// The production killer: logs an error and exits the process with code 1.
#[derive(Debug, Default, Clone, Copy)]
pub struct ProcessKiller;

impl Killer for ProcessKiller {
    fn kill(&self, key: &Key, deadline: Instant) {
        tracing::error!(
            %key,
            late_by = ?Instant::now().saturating_duration_since(deadline),
            "leadership killer deadline passed while this process may still act as leader; exiting with code 1"
        );
        std::process::exit(1);
    }

    fn observes_arming(&self) -> bool {
        false
    }
}

/// A killer for tests: records armings and kills instead of exiting.
#[derive(Default)]
pub struct RecordingKiller {
    events: Mutex<Vec<ArmEvent>>,
    kills: Mutex<Vec<Kill>>,
}

/// One recorded kill.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Kill {
    /// The leadership's key.
    pub key: Key,
    /// The deadline that passed.
    pub deadline: Instant,
    /// When the kill ran.
    pub at: Instant,
}

impl RecordingKiller {
    /// A new, empty recorder.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// Every deadline change so far, in order.
    pub fn events(&self) -> Vec<ArmEvent> {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Every kill so far, in order.
    pub fn kills(&self) -> Vec<Kill> {
        self.kills
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl fmt::Debug for RecordingKiller {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RecordingKiller")
            .field("events", &self.events().len())
            .field("kills", &self.kills())
            .finish()
    }
}

impl Killer for RecordingKiller {
    fn kill(&self, key: &Key, deadline: Instant) {
        tracing::warn!(%key, "recording killer: deadline passed");
        self.kills
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(Kill {
                key: key.clone(),
                deadline,
                at: Instant::now(),
            });
    }

    fn armed(&self, event: &ArmEvent) {
        self.events
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(event.clone());
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::end::EndSignal;

    fn armed(basis: Instant, after: Duration) -> (Arc<RecordingKiller>, Arc<KillerTimer>) {
        let killer = RecordingKiller::new();
        // the clock's task outlives its handle while a timer is armed
        let timer = KillerTimer::start(
            Key::new("k").unwrap(),
            killer.clone(),
            EndSignal::default(),
            &KillerClock::new(),
            basis,
            after,
        );
        (killer, timer)
    }

    /// A deadline that passed while armed fires, whatever change comes
    /// before the task looks: a late renewal or a late disarm does not
    /// undo it.
    #[tokio::test(start_paused = true)]
    async fn a_passed_deadline_fires_even_if_renewed_or_disarmed_late() {
        let now = Instant::now();
        let d = Duration::from_secs(10);
        let (killer, timer) = armed(now, d);
        tokio::time::sleep(d / 2).await;
        // the task sleeps until now + d; the clock jumps past it and the
        // renewal's answer comes before the task runs again
        tokio::time::advance(d).await;
        timer.renewed(Instant::now(), d, Instant::now());
        tokio::time::sleep(Duration::from_millis(1)).await;
        let kills = killer.kills();
        assert_eq!(kills.len(), 1, "{kills:?}");
        assert_eq!(kills[0].deadline, now + d);

        let (killer, timer) = armed(Instant::now() - d * 2, d);
        timer.disarm();
        tokio::time::sleep(Duration::from_millis(1)).await;
        assert_eq!(killer.kills().len(), 1, "a late disarm undid the kill");
    }

    /// Renewals push the deadline without waking the task; an earlier
    /// deadline (a cap) and a disarm do wake it, and it fires at the
    /// deadline in force, not at one it saw before.
    #[tokio::test(start_paused = true)]
    async fn the_task_follows_later_and_earlier_deadlines() {
        let start = Instant::now();
        let d = Duration::from_secs(10);
        let (killer, timer) = armed(start, d);
        tokio::time::sleep(d / 4).await;
        timer.renewed(Instant::now(), d * 2, Instant::now());
        tokio::time::sleep(d).await;
        assert!(killer.kills().is_empty(), "fired at an old deadline");
        let capped = Instant::now() + d / 10;
        timer.cap(Instant::now(), d / 10);
        tokio::time::sleep(d / 5).await;
        let kills = killer.kills();
        assert_eq!(kills.len(), 1, "{kills:?}");
        assert_eq!(kills[0].deadline, capped);
        assert!(kills[0].at >= capped && kills[0].at <= capped + Duration::from_millis(2));

        let (killer, timer) = armed(Instant::now(), d);
        tokio::time::sleep(d / 2).await;
        timer.disarm();
        tokio::time::sleep(d).await;
        assert!(killer.kills().is_empty());
    }
}
