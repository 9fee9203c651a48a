//! [`Elections::campaign`]: wait until this instance leads a key, and
//! [`Standby`], the one attempt it repeats, for callers with their own loop.

use std::{
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    time::Duration,
};

use ttl_storage::{ErrorKind, Key, TtlStorage};

use crate::{
    CandidateId, Elections, ElectionsError, Leadership, SharedClaim,
    candidates::{self, Candidacy},
    fencing::timed,
    handover, telemetry,
    timing::Timing,
};

/// The longest pause between two acquisition attempts of a campaign (and
/// between two reads of [`Elections::observe`] on a driver that cannot
/// watch); shorter leases poll every quarter lease.
pub const MAX_POLL_INTERVAL: Duration = Duration::from_secs(1);

/// The pause between two attempts for leadership duration `timing`.
pub(crate) fn poll_interval(timing: Timing) -> Duration {
    timing.renew_interval().min(MAX_POLL_INTERVAL)
}

impl Elections {
    /// Tries to acquire `key` until it succeeds, and returns the leadership.
    ///
    /// While it waits it is a **visible candidate**: a short-TTL record in
    /// one of the key's candidate slots (see [`crate::Candidate`]) carries
    /// its value and since when it waits; [`crate::inspect`] and
    /// [`Leadership::candidates`] list it, and a leader may hand over to it
    /// ([`Leadership::hand_over`]). The record is renewed while it waits
    /// and deleted when it stops waiting (acquired, failed, or the future
    /// dropped).
    ///
    /// Between attempts it waits for the driver's watch
    /// ([`TtlStorage::watch`]) to report that the lease (or its own
    /// candidate record, which a hand-over deletes) may have gone, or for
    /// [`MAX_POLL_INTERVAL`] (a quarter lease if shorter), whichever comes
    /// first. Storage errors that may pass (transient, outcome unknown) are
    /// logged and retried; cancel the future to stop waiting. A caller that
    /// needs its own loop (several keys, its own deadline) uses
    /// [`Elections::stand_by`] instead.
    ///
    /// # Errors
    ///
    /// As [`acquire_leadership`](Self::acquire_leadership), except the
    /// storage errors that are retried.
    pub async fn campaign(
        &self,
        key: &Key,
        value: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<Leadership, ElectionsError> {
        self.campaign_with_priority(key, value, duration, 0).await
    }

    /// [`campaign`](Self::campaign) as a candidate of `priority`
    /// ([`Standby::with_priority`]): a free key goes to the highest
    /// priority waiting, and a leader may hand over to a higher one
    /// ([`crate::Preemption`]). Priority 0 is [`campaign`](Self::campaign).
    ///
    /// # Errors
    ///
    /// As [`campaign`](Self::campaign).
    pub async fn campaign_with_priority(
        &self,
        key: &Key,
        value: impl AsRef<[u8]>,
        duration: Duration,
        priority: i32,
    ) -> Result<Leadership, ElectionsError> {
        let mut standby = self.stand_by(key, value, duration)?.with_priority(priority);
        let pause = standby.pause;
        loop {
            match standby.try_acquire().await {
                Ok(Some(leadership)) => return Ok(leadership),
                Ok(None) => standby.changed(pause).await,
                Err(ElectionsError::Storage(err)) if err.kind() != ErrorKind::Permanent => {
                    tracing::warn!(%key, error = %err, "campaign: store error; retrying");
                    tokio::time::sleep(pause).await;
                }
                Err(ElectionsError::Overloaded { retry_after, .. }) => {
                    tracing::debug!(%key, "campaign: acquisitions are shed; waiting");
                    tokio::time::sleep(retry_after.max(pause)).await;
                }
                Err(err) => return Err(err),
            }
        }
    }

    /// A standing candidacy for `key`, for callers that run their own
    /// acquisition loop: each [`Standby::try_acquire`] is one attempt that
    /// also keeps the candidacy announced, so the standby is listed by
    /// [`crate::inspect`] and can be named by a leader's
    /// [`Leadership::hand_over`] (which this standby then takes).
    /// [`Elections::campaign`] is this in a loop. Dropping the standby
    /// withdraws the candidacy (in the background).
    ///
    /// ```
    /// use std::time::Duration;
    /// use elections::{Elections, RecordingKiller};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let storage = storage_mem::MemStorage::new();
    /// let key = ttl_storage::Key::new("cron-leader")?;
    /// let d = Duration::from_secs(20);
    /// let alpha = Elections::with_killer(storage.clone(), RecordingKiller::new());
    /// let leading = alpha.acquire_leadership(&key, "alpha", d).await?.expect("free");
    ///
    /// let bravo = Elections::with_killer(storage, RecordingKiller::new());
    /// let mut standby = bravo.stand_by(&key, "bravo", d)?;
    /// assert!(standby.try_acquire().await?.is_none()); // held: now a listed candidate
    /// let to = leading.hand_over(None).await?;
    /// assert_eq!(to.id, *standby.id());
    /// let successor = standby.try_acquire().await?.expect("handed over to bravo");
    /// assert!(successor.fencing_token() > leading.fencing_token());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// [`ElectionsError::Invalid`] for a leadership duration the timing
    /// rules refuse or a key whose records would be invalid keys,
    /// [`ElectionsError::ReservedKey`] for a key in the reserved namespace.
    pub fn stand_by(
        &self,
        key: &Key,
        value: impl AsRef<[u8]>,
        duration: Duration,
    ) -> Result<Standby, ElectionsError> {
        let timing = Timing::new(duration)?;
        Self::check_key(key)?;
        let storage = self.inner_storage();
        let (instance, counter) = self.next_nonce();
        let value = value.as_ref().to_vec();
        Ok(Standby {
            elections: self.clone(),
            key: key.clone(),
            candidacy: WithdrawOnDrop {
                storage,
                candidacy: Candidacy::new(instance, counter, &value, duration),
                limit: timing.call_timeout(),
                elections: self.clone(),
            },
            value,
            duration,
            limit: timing.call_timeout(),
            pause: poll_interval(timing),
            slot_gone: Arc::default(),
            claim: None,
        })
    }
}

/// A standing candidacy for one key: see [`Elections::stand_by`].
pub struct Standby {
    elections: Elections,
    key: Key,
    value: Vec<u8>,
    duration: Duration,
    limit: Duration,
    pause: Duration,
    candidacy: WithdrawOnDrop,
    /// Set by a detached [`Standby::watch`] that saw the candidate record go.
    slot_gone: Arc<AtomicBool>,
    /// The shared claim every leadership this standby takes holds.
    claim: Option<SharedClaim>,
}

impl std::fmt::Debug for Standby {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Standby")
            .field("key", &self.key)
            .field("id", &self.candidacy.candidacy.id)
            .finish_non_exhaustive()
    }
}

impl Standby {
    /// This candidacy's id: what a leader's hand-over names.
    pub fn id(&self) -> &CandidateId {
        &self.candidacy.candidacy.id
    }

    /// The key this standby waits for.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// Every leadership this standby takes also holds `claim`, taken after
    /// the lease and renewed with it: a conflicting claim fails the
    /// attempt with [`ElectionsError::ClaimConflict`] (the lease is given
    /// back), and a claim lost while leading ends the leadership
    /// ([`crate::EndReason::ClaimLost`]). See [`crate::claim`].
    #[must_use]
    pub fn with_claim(mut self, claim: SharedClaim) -> Self {
        self.claim = Some(claim);
        self
    }

    /// Stands with `priority` (0 by default; any `i32`), carried in the
    /// candidate record ([`crate::Candidate::priority`]). A free key goes
    /// to the highest priority waiting: [`try_acquire`](Self::try_acquire)
    /// leaves a free key alone while a candidate of a higher priority is
    /// listed (at most until that record expires, half a lease, at least
    /// 2 s, after its campaign stops). Among equal priorities nothing
    /// changes: the race for a free key, and the longest-waiting first for
    /// a hand-over. A leader may hand over to a higher priority after a
    /// hold-down ([`crate::Preemption`]). Set it before the first attempt.
    #[must_use]
    pub fn with_priority(mut self, priority: i32) -> Self {
        self.candidacy.candidacy.set_priority(priority);
        self
    }

    /// This standby's priority ([`with_priority`](Self::with_priority)).
    pub fn priority(&self) -> i32 {
        self.candidacy.candidacy.priority
    }

    /// One attempt: acquires the key when it is free, takes it when a
    /// hand-over marker names this candidacy, and otherwise announces (or
    /// renews) the candidacy and returns `Ok(None)`.
    ///
    /// # Errors
    ///
    /// As [`Elections::acquire_leadership`]; the candidacy is still kept
    /// up after an error.
    pub async fn try_acquire(&mut self) -> Result<Option<Leadership>, ElectionsError> {
        let storage = self.candidacy.storage.clone();
        if self.slot_gone.swap(false, Ordering::Relaxed) {
            self.candidacy.candidacy.check_soon();
        }
        let look = timed(self.limit, storage.get(&self.key)).await;
        let attempt = match look {
            Ok(None) if self.defers().await => {
                telemetry::attempt(&self.key, "deferred");
                Ok(None)
            }
            Ok(None) => {
                self.elections
                    .acquire_from(
                        &self.key,
                        &self.value,
                        self.duration,
                        None,
                        self.claim.as_ref(),
                    )
                    .await
            }
            Ok(Some(record)) => match handover::marker_target(&record) {
                Some(target) if target == self.id().0.as_bytes() => {
                    tracing::info!(key = %self.key, "the key was handed over to us; taking it");
                    self.elections
                        .acquire_from(
                            &self.key,
                            &self.value,
                            self.duration,
                            Some(&record),
                            self.claim.as_ref(),
                        )
                        .await
                }
                _ => {
                    telemetry::attempt(&self.key, "held_by_other");
                    Ok(None)
                }
            },
            Err(err) => {
                telemetry::attempt(&self.key, "error");
                Err(err.into())
            }
        };
        // No await between an acquisition and the return: a caller that
        // drops this future must never lose a leadership it already holds.
        // The winner stops being a candidate at once (listings leave the
        // leader out even while the withdrawal is under way).
        if let Ok(Some(_)) = &attempt {
            self.candidacy.withdraw_now();
            return attempt;
        }
        self.candidacy
            .candidacy
            .keep_up(&*storage, &self.key, self.limit)
            .await;
        attempt
    }

    /// True when a candidate of a higher priority than ours is listed: a
    /// free key is left to it. A listing that fails never defers (the
    /// acquisition itself then decides, as without priorities).
    async fn defers(&self) -> bool {
        let storage = &self.candidacy.storage;
        let own = self.priority();
        match candidates::list(&**storage, &self.key, self.limit, None).await {
            Ok(listed) => listed
                .iter()
                .any(|c| c.priority > own && c.id != *self.id()),
            Err(_) => false,
        }
    }

    /// Waits until the key (or this candidacy's record, which a hand-over
    /// to it deletes) may have gone — the driver's watch — or `at_most`.
    pub async fn changed(&mut self, at_most: Duration) {
        let storage = &self.candidacy.storage;
        let slot_watch = self
            .candidacy
            .candidacy
            .slot_key()
            .and_then(|slot| storage.watch(slot).ok());
        let key_watch = storage.watch(&self.key).ok();
        tokio::select! {
            () = optional(key_watch) => {}
            // Our record may be gone (a hand-over's wake-up, or expiry):
            // check it at the next attempt, or this watch fires at once.
            () = optional(slot_watch) => self.candidacy.candidacy.check_soon(),
            () = tokio::time::sleep(at_most) => {}
        }
    }

    /// A future that completes when [`changed`](Self::changed) would, without
    /// borrowing the standby (for a caller that waits on several keys);
    /// `None` when the driver cannot watch.
    pub fn watch(&self) -> Option<impl Future<Output = ()> + Send + 'static + use<>> {
        let storage = &self.candidacy.storage;
        let key_watch = storage.watch(&self.key).ok();
        let slot_watch = self
            .candidacy
            .candidacy
            .slot_key()
            .and_then(|slot| storage.watch(slot).ok());
        if key_watch.is_none() && slot_watch.is_none() {
            return None;
        }
        let slot_gone = self.slot_gone.clone();
        Some(async move {
            tokio::select! {
                () = optional(key_watch) => {}
                () = optional(slot_watch) => slot_gone.store(true, Ordering::Relaxed),
            }
        })
    }
}

/// A watch, or a future that never completes.
async fn optional(watch: Option<ttl_storage::Watch>) {
    match watch {
        Some(watch) => watch.await,
        None => std::future::pending().await,
    }
}

/// Withdraws the candidacy in the background when the campaign ends
/// (acquired, failed, or its future dropped).
struct WithdrawOnDrop {
    storage: Arc<dyn TtlStorage>,
    candidacy: Candidacy,
    /// The storage call limit of the leadership duration.
    limit: Duration,
    /// Where the background withdrawal runs (cleanup waits for it).
    elections: Elections,
}

impl WithdrawOnDrop {
    /// Starts the withdrawal of the announced record, if any, in the
    /// background (no await: a caller that just won must not lose the
    /// leadership to a dropped future).
    fn withdraw_now(&mut self) {
        let Some(withdrawal) = self.candidacy.withdrawal(self.limit) else {
            return;
        };
        let storage = self.storage.clone();
        self.elections
            .spawn_background(async move { withdrawal.run(&*storage).await });
    }
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        self.withdraw_now();
    }
}

/// Waits until `key` may have been removed (the driver's watch), at most `pause`.
pub(crate) async fn wait_for_removal(storage: &dyn TtlStorage, key: &Key, pause: Duration) {
    match storage.watch(key) {
        Ok(watch) => {
            tokio::select! {
                () = watch => {}
                () = tokio::time::sleep(pause) => {}
            }
        }
        Err(_) => tokio::time::sleep(pause).await,
    }
}
