//! The renewal task that keeps a leadership alive.

use std::sync::Arc;

use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use ttl_storage::{ErrorKind, Key, TtlStorage};

use crate::{
    claim::{Found, SharedClaim},
    end::{EndReason, EndSignal},
    fencing::timed,
    killer::KillerTimer,
    telemetry,
    timing::{RENEWAL_ATTEMPTS, Timing},
};

/// Log every this many successful renewals (the first is always logged).
const LOG_EVERY: u64 = 100;

/// Everything the renewal task needs; it holds no reference to `Elections`.
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
}

enum Round {
    Renewed(Instant),
    Lost(EndReason),
    Stopped,
}

impl Renewal {
    /// Renews every `d/4` until stopped or lost.
    pub(crate) async fn run(mut self) {
        let mut renewals: u64 = 0;
        loop {
            let next = self.lease_start + self.timing.renew_interval();
            tokio::select! {
                biased;
                () = self.stop.cancelled() => return,
                () = tokio::time::sleep_until(next) => {}
            }
            let round = self.round().await;
            self.load.round_finished(next, Instant::now(), &self.timing);
            match round {
                Round::Renewed(start) => {
                    let slack = self.killer.deadline().map(|deadline| {
                        let now = Instant::now();
                        if deadline >= now {
                            (deadline - now).as_secs_f64()
                        } else {
                            -(now - deadline).as_secs_f64()
                        }
                    });
                    self.metrics.renewed(slack);
                    self.killer.renewed(start, self.timing.kill_after_success());
                    self.lease_start = start;
                    renewals += 1;
                    if renewals == 1 || renewals.is_multiple_of(LOG_EVERY) {
                        tracing::info!(renewals, "leadership renewed");
                    } else {
                        tracing::trace!(renewals, "leadership renewed");
                    }
                }
                Round::Lost(reason) => {
                    tracing::error!(
                        %reason,
                        "leadership lost; the killer stays armed until the owner releases the key"
                    );
                    // No compare-and-delete here: the owner's services may
                    // still be running, so the record must keep others out
                    // until the owner releases it or it expires.
                    if self.end.end(reason.clone()) {
                        telemetry::lost(&self.key, &reason);
                    }
                    return;
                }
                Round::Stopped => return,
            }
        }
    }

    /// One renewal round: the lease, then the shared claim if there is
    /// one. Renewed (from the start of the lease write, the earlier of the
    /// two) only when both were written.
    async fn round(&self) -> Round {
        let renewed = self.renew_lease().await;
        match (renewed, &self.claim) {
            (Round::Renewed(start), Some(claim)) => match self.refresh_claim(claim).await {
                Round::Renewed(_) => Round::Renewed(start),
                other => other,
            },
            (round, _) => round,
        }
    }

    /// Refreshes the shared claim: up to [`RENEWAL_ATTEMPTS`] attempts,
    /// `d/20` apart, each capping the killer as a renewal attempt does.
    async fn refresh_claim(&self, claim: &SharedClaim) -> Round {
        let mut last_error = String::new();
        for attempt in 1..=RENEWAL_ATTEMPTS {
            let start = Instant::now();
            self.killer.cap(start, self.timing.kill_before_write());
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

    /// Renews the lease: up to [`RENEWAL_ATTEMPTS`] attempts, `d/20` apart.
    async fn renew_lease(&self) -> Round {
        let mut last_error = String::new();
        for attempt in 1..=RENEWAL_ATTEMPTS {
            let start = Instant::now();
            self.killer.cap(start, self.timing.kill_before_write());
            let cas = timed(
                self.timing.call_timeout(),
                self.storage.compare_and_swap(
                    &self.key,
                    &self.value,
                    &self.value,
                    self.timing.ttl(),
                ),
            );
            let result = tokio::select! {
                biased;
                () = self.stop.cancelled() => return Round::Stopped,
                result = cas => result,
            };
            self.metrics.attempt(
                &self.key,
                start.elapsed(),
                result.as_ref().err().map(ttl_storage::StorageError::kind),
            );
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
