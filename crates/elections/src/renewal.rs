//! Renewal: the rounds that keep a leadership alive.
//!
//! A round is due `d/4` after the start of the write that renewed the
//! lease last. Its first attempt is one compare-and-swap `v -> v`; most
//! rounds end there, and those are run by the few tasks of
//! [`batch`] for every leadership of an [`Elections`](crate::Elections)
//! (one timer queue, no task per leadership). Any other first answer, and
//! every round of a leadership with a shared claim, is finished by a task
//! of its own with [`Renewal::finish_round`]: up to [`RENEWAL_ATTEMPTS`]
//! attempts `d/20` apart, a read-back after an unknown outcome, the
//! claim's refresh; then the leadership goes back to the batch.

pub(crate) mod batch;

use std::{sync::Arc, task::Poll};

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use ttl_storage::{ErrorKind, Key, StorageError, TtlStorage};

use crate::{
    claim::{Found, SharedClaim},
    end::{EndReason, EndSignal},
    fencing::{timed, timed_from},
    killer::KillerTimer,
    telemetry,
    timing::{RENEWAL_ATTEMPTS, Timing},
};

/// Log every this many successful renewals (the first is always logged).
const LOG_EVERY: u64 = 100;

/// Everything a leadership's renewal needs; it holds no reference to
/// `Elections`.
pub(crate) struct Renewal {
    pub(crate) storage: Arc<dyn TtlStorage>,
    pub(crate) key: Key,
    pub(crate) value: Arc<[u8]>,
    pub(crate) timing: Timing,
    pub(crate) killer: Arc<KillerTimer>,
    pub(crate) end: EndSignal,
    /// Cancelled by the owner's release: stop without touching anything.
    pub(crate) stop: CancellationToken,
    /// Start of the write that began the current lease.
    pub(crate) lease_start: Instant,
    /// The shared claim renewed with the lease, if any ([`crate::claim`]).
    pub(crate) claim: Option<SharedClaim>,
    /// The elections' load: each round reports how late it finished.
    pub(crate) load: Arc<crate::load::Load>,
    /// This leadership's metric handles.
    pub(crate) metrics: telemetry::RenewalMetrics,
    /// Successful renewals so far (every [`LOG_EVERY`]th is logged).
    pub(crate) renewals: u64,
    /// The leadership's span (key and fencing token) for its logs.
    pub(crate) span: tracing::Span,
    /// Whether the killer looks at every change of the deadline
    /// ([`Killer::observes_arming`](crate::Killer::observes_arming)).
    pub(crate) arming_observed: bool,
}

/// How one renewal round ended.
pub(crate) enum Round {
    /// Renewed by the write that started at this instant.
    Renewed(Instant),
    /// Lost: the work must stop.
    Lost(EndReason),
    /// Stopped by the owner's release.
    Stopped,
}

/// One compare-and-swap attempt of a round: when it started and what it
/// answered (`None`: stopped by the owner's release while in flight).
pub(crate) struct Attempt {
    start: Instant,
    /// When the answer came.
    end: Instant,
    result: Option<Result<bool, StorageError>>,
}

impl Renewal {
    /// When the next round is due: `d/4` after the start of the write that
    /// renewed the lease last.
    pub(crate) fn due(&self) -> Instant {
        self.lease_start + self.timing.renew_interval()
    }

    /// The write's start and the answer's arrival, when the round needs
    /// nothing after `first`: a clean success and no shared claim to
    /// refresh with it.
    pub(crate) fn completed(&self, first: &Attempt) -> Option<(Instant, Instant)> {
        (self.claim.is_none() && matches!(first.result, Some(Ok(true))))
            .then_some((first.start, first.end))
    }

    /// The rest of a round whose first attempt was `first`: the lease's
    /// further attempts (up to [`RENEWAL_ATTEMPTS`], `d/20` apart), then the
    /// shared claim if there is one. Renewed (from the start of the lease
    /// write, the earlier of the two) only when both were written.
    pub(crate) async fn finish_round(&self, first: Attempt) -> Round {
        let renewed = self.renew_lease(first).await;
        match (renewed, &self.claim) {
            (Round::Renewed(start), Some(claim)) => match self.refresh_claim(claim).await {
                Round::Renewed(_) => Round::Renewed(start),
                other => other,
            },
            (round, _) => round,
        }
    }

    /// A round renewed the lease with the write that started at `start`
    /// (answered by `now`): the killer's deadline moves, the next round is
    /// due `d/4` after `start`.
    pub(crate) fn renewed(&mut self, start: Instant, now: Instant) {
        let before = self
            .killer
            .renewed(start, self.timing.kill_after_success(), now);
        // how much time was left before the deadline this renewal replaced
        let slack = before.map(|deadline| {
            if deadline >= now {
                (deadline - now).as_secs_f64()
            } else {
                -(now - deadline).as_secs_f64()
            }
        });
        self.metrics.renewed(slack);
        self.lease_start = start;
        self.renewals += 1;
        if self.renewals == 1 || self.renewals.is_multiple_of(LOG_EVERY) {
            let _span = self.span.enter();
            tracing::info!(renewals = self.renewals, "leadership renewed");
        }
    }

    /// The round lost the leadership: the handle fires, the killer stays
    /// armed until the owner releases the key.
    pub(crate) fn lost(&self, reason: EndReason) {
        let _span = self.span.enter();
        tracing::error!(
            %reason,
            "leadership lost; the killer stays armed until the owner releases the key"
        );
        // No compare-and-delete here: the owner's services may still be
        // running, so the record must keep others out until the owner
        // releases it or it expires.
        if self.end.end(reason.clone()) {
            telemetry::lost(&self.key, &reason);
        }
    }

    /// Reports how late the round due at `due` finished, at `now`
    /// ([`crate::load`]).
    pub(crate) fn round_finished(&self, due: Instant, now: Instant) {
        self.load.round_finished(due, now, &self.timing);
    }

    /// One compare-and-swap `v -> v` of the lease, the killer capped
    /// before it.
    pub(crate) async fn attempt(&self) -> Attempt {
        self.attempt_from(Instant::now()).await
    }

    /// [`Renewal::attempt`] with `start` read from the clock by the caller,
    /// at most a moment before (an earlier start only makes the lease and
    /// the killer count from earlier).
    pub(crate) async fn attempt_from(&self, start: Instant) -> Attempt {
        self.cap_killer(start);
        let mut cas =
            self.storage
                .compare_and_swap(&self.key, &self.value, &self.value, self.timing.ttl());
        // Polled once first: a store that answers at once (storage-mem)
        // then needs no timer and no stop waiter. Otherwise the call is
        // limited from `start` and a stop returns at once (the store's
        // answer is taken over a stop that comes at the same time: it is
        // what the store did).
        let result = match futures::poll!(cas.as_mut()) {
            Poll::Ready(result) => result,
            Poll::Pending => {
                let timed = timed_from(start, self.timing.call_timeout(), cas.as_mut());
                tokio::select! {
                    biased;
                    result = timed => result,
                    () = self.stop.cancelled() => {
                        return Attempt { start, end: Instant::now(), result: None };
                    }
                }
            }
        };
        let end = Instant::now();
        self.metrics.attempt(
            &self.key,
            end - start,
            result.as_ref().err().map(StorageError::kind),
        );
        Attempt {
            start,
            end,
            result: Some(result),
        }
    }

    /// Caps the killer's deadline at `start + 0.75 d` before an attempt
    /// that starts at `start`, unless that changes nothing and no one
    /// watches: while this renewal runs, the deadline in force is at most
    /// the one its last successful write set (`lease_start + 0.8 d`; caps
    /// only lower it), so a cap at or after that, at a start before it,
    /// leaves it as it is. That is every first attempt on time: the cap
    /// then costs a lock and a cache miss per renewal for nothing. A
    /// deadline that has passed is always told (it must fire).
    fn cap_killer(&self, start: Instant) {
        let set = self.lease_start + self.timing.kill_after_success();
        let cap = start + self.timing.kill_before_write();
        if self.arming_observed || cap < set || set <= start {
            self.killer.cap(start, self.timing.kill_before_write());
        }
    }

    /// Refreshes the shared claim: up to [`RENEWAL_ATTEMPTS`] attempts,
    /// `d/20` apart, each capping the killer as a renewal attempt does.
    async fn refresh_claim(&self, claim: &SharedClaim) -> Round {
        let mut last_error = String::new();
        for attempt in 1..=RENEWAL_ATTEMPTS {
            let start = Instant::now();
            self.cap_killer(start);
            let refresh = claim.refresh(
                &*self.storage,
                self.timing.ttl(),
                self.timing.call_timeout(),
            );
            let result = tokio::select! {
                biased;
                () = self.stop.cancelled() => return Round::Stopped,
                result = refresh => result,
            };
            match result {
                Ok(Found::Ours) => return Round::Renewed(start),
                Ok(Found::Other(found)) => {
                    return Round::Lost(EndReason::ClaimLost {
                        claim: claim.key().clone(),
                        found,
                    });
                }
                Err(err) => {
                    tracing::warn!(attempt, claim = %claim.key(), error = %err, "claim refresh failed");
                    last_error = format!("claim {}: {err}", claim.key());
                }
            }
            if attempt < RENEWAL_ATTEMPTS && !self.pause_before_retry().await {
                return Round::Stopped;
            }
        }
        Round::Lost(EndReason::StoreUnavailable {
            attempts: RENEWAL_ATTEMPTS,
            last_error,
        })
    }

    /// Waits the retry interval (`d/20`) between two attempts of a round:
    /// false if the loop was stopped first.
    async fn pause_before_retry(&self) -> bool {
        tokio::select! {
            biased;
            () = self.stop.cancelled() => false,
            () = tokio::time::sleep(self.timing.retry_interval()) => true,
        }
    }

    /// Renews the lease: `first`, then up to [`RENEWAL_ATTEMPTS`] in all,
    /// `d/20` apart.
    async fn renew_lease(&self, first: Attempt) -> Round {
        let mut last_error = String::new();
        let mut first = Some(first);
        for attempt in 1..=RENEWAL_ATTEMPTS {
            let Attempt { start, result, .. } = match first.take() {
                Some(first) => first,
                None => self.attempt().await,
            };
            let Some(result) = result else {
                return Round::Stopped;
            };
            match result {
                Ok(true) => return Round::Renewed(start),
                Ok(false) => return Round::Lost(self.who_took_it().await),
                Err(err) if err.kind() == ErrorKind::OutcomeUnknown => {
                    // The swap v -> v is idempotent: if the record still holds
                    // our value we may simply try again; if it does not, the
                    // lease is gone whatever happened to our write.
                    tracing::warn!(attempt, error = %err, "renewal outcome unknown; reading the record back");
                    match self.read_back().await {
                        Some(true) => last_error = err.to_string(),
                        Some(false) => return Round::Lost(self.who_took_it().await),
                        None => last_error = err.to_string(),
                    }
                }
                Err(err) => {
                    tracing::warn!(attempt, error = %err, "renewal attempt failed");
                    last_error = err.to_string();
                }
            }
            if attempt < RENEWAL_ATTEMPTS && !self.pause_before_retry().await {
                return Round::Stopped;
            }
        }
        Round::Lost(EndReason::StoreUnavailable {
            attempts: RENEWAL_ATTEMPTS,
            last_error,
        })
    }

    /// The record no longer holds our value: tells [`EndReason::Stolen`]
    /// (another value) from [`EndReason::Expired`] (no record) with one
    /// more read. A failed read, or a hand-over marker, is `Stolen` by an
    /// unknown holder.
    async fn who_took_it(&self) -> EndReason {
        let read = timed(self.timing.call_timeout(), self.storage.get(&self.key));
        let result = tokio::select! {
            biased;
            () = self.stop.cancelled() => return EndReason::Stolen { by: None },
            result = read => result,
        };
        match result {
            Ok(None) => EndReason::Expired,
            Ok(Some(other)) if *other == *self.value => {
                // Our value again (an ABA through a late write): someone
                // changed it in between; it is not ours to trust any more.
                EndReason::Stolen { by: None }
            }
            Ok(Some(other)) if crate::handover::is_marker(&other) => EndReason::Stolen { by: None },
            Ok(Some(other)) => EndReason::Stolen {
                by: Some(crate::record::leader_value(&other).to_vec()),
            },
            Err(err) => {
                tracing::warn!(error = %err, "could not read who holds the record");
                EndReason::Stolen { by: None }
            }
        }
    }

    /// `Some(true)` if the record holds our value, `Some(false)` if it is
    /// absent or another's, `None` if the read failed too.
    async fn read_back(&self) -> Option<bool> {
        let read = timed(self.timing.call_timeout(), self.storage.get(&self.key));
        let result = tokio::select! {
            biased;
            () = self.stop.cancelled() => return None,
            result = read => result,
        };
        match result {
            Ok(current) => Some(current.as_deref() == Some(&*self.value)),
            Err(err) => {
                tracing::warn!(error = %err, "read-back failed");
                None
            }
        }
    }
}
