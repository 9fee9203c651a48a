//! Hand-over to a named candidate: [`Leadership::hand_over`].
//!
//! The leader stops its work, then replaces its record, by one
//! compare-and-swap, with a short-TTL **marker** that names the candidate
//! ([`crate::Candidate::id`]); then it deletes the candidate's record, which
//! wakes a candidate waiting on the driver's watch. The named candidate
//! (and only it: the others see a live record they do not own) takes the
//! marker with `compare_and_swap(marker -> its record)`, advances the
//! fencing counter and confirms, exactly as after an insert. If it does not
//! take the marker within the marker's TTL, the marker expires and anyone
//! may acquire the key as usual. See `docs/guarantees.md` for the safety
//! argument.

use std::time::Duration;

use ttl_storage::{ErrorKind, Key, StorageError, Ttl};

use crate::{
    Candidate, Elections, EndReason, Leadership,
    candidates::{self, CandidateId},
    fencing::timed,
    telemetry,
};

/// Every value that starts with this prefix is reserved: a leader's value
/// may not start with it, so no leader record is ever mistaken for a marker.
pub(crate) const RESERVED_PREFIX: &[u8] = b"\0elections/";

/// The prefix of a hand-over marker; the candidate's id follows.
const MARKER_PREFIX: &[u8] = b"\0elections/reserved-for\0";

/// True when `record` is a hand-over marker.
pub(crate) fn is_marker(record: &[u8]) -> bool {
    record.starts_with(MARKER_PREFIX)
}

/// The marker reserving a key for candidate `id`.
pub(crate) fn marker(id: &CandidateId) -> Vec<u8> {
    let mut out = MARKER_PREFIX.to_vec();
    out.extend_from_slice(id.0.as_bytes());
    out
}

/// The candidate id a marker names, if `record` is a marker.
pub(crate) fn marker_target(record: &[u8]) -> Option<&[u8]> {
    record.strip_prefix(MARKER_PREFIX)
}

/// The marker's TTL for leadership duration `d`: half a lease, at least 2 s.
/// The named candidate must take the key within it; then anyone may.
pub(crate) fn marker_ttl(d: Duration) -> Ttl {
    Ttl::from_secs((d.as_secs() / 2).max(2)).unwrap_or(Ttl::NEVER)
}

/// Why a hand-over did not happen.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum HandOverError {
    /// No candidate is announced: nothing was changed, the leader still
    /// leads (use [`Leadership::hand_over_or_release`] to step down anyway).
    #[error("no candidate is waiting for the key; still leading")]
    NoCandidate,
    /// The named candidate is no longer announced: nothing was changed.
    #[error("candidate {0} is no longer waiting; still leading")]
    NoSuchCandidate(CandidateId),
    /// The leadership had already ended (or ended while its work stopped).
    #[error("the leadership ended before the hand-over: {0}")]
    Ended(EndReason),
    /// The candidates could not be listed (nothing was changed: the
    /// leadership is still active, check [`Leadership::is_active`]), or the
    /// marker could not be written after the work stopped (the record was
    /// then deleted, or will expire, so anyone may take the key).
    #[error("hand-over failed: {0}")]
    Storage(#[from] StorageError),
}

impl Leadership {
    /// The candidates announced for this key, longest-waiting first. The
    /// leader's own candidacies are never listed (a record its campaign
    /// left behind, while the withdrawal is under way): a leader is not a
    /// candidate for what it leads.
    ///
    /// # Errors
    ///
    /// The store's error when no candidate slot could be read.
    pub async fn candidates(&self) -> Result<Vec<Candidate>, StorageError> {
        let timing = self.owner.timing_of(self.duration);
        let leader = self.owner.instance_hex();
        candidates::list(
            &*self.owner.inner_storage(),
            &self.key,
            timing,
            Some(&leader),
        )
        .await
    }

    /// Hands the leadership over to `to`, or, with `None`, to the candidate
    /// that has waited longest. Refuses with [`HandOverError::NoCandidate`]
    /// (or [`HandOverError::NoSuchCandidate`]) before touching anything, so
    /// the leader keeps leading.
    ///
    /// The candidates are listed again first (the leader itself never
    /// among them); a listing that fails is [`HandOverError::Storage`] with
    /// nothing changed: the leader still leads.
    ///
    /// Otherwise, in this order: the handle fires with
    /// [`EndReason::Superseded`] (stop the work now); the tasks spawned with
    /// [`Leadership::spawn`] are waited for (renewal goes on meanwhile);
    /// renewal stops; the record is swapped for a marker reserved for the
    /// candidate; the killer is disarmed; the candidate is woken. The
    /// candidate then acquires the key with a larger fencing token. Work not
    /// spawned with [`Leadership::spawn`] must have stopped before the call
    /// returns, as for [`Leadership::release`].
    ///
    /// ```
    /// use std::time::Duration;
    /// use elections::{Elections, HandOverError, RecordingKiller};
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// let storage = storage_mem::MemStorage::new();
    /// let key = ttl_storage::Key::new("cron-leader")?;
    /// let d = Duration::from_secs(20);
    /// let alpha = Elections::with_killer(storage.clone(), RecordingKiller::new());
    /// let leadership = alpha.acquire_leadership(&key, "alpha", d).await?.expect("free");
    /// // Nobody waits: refused, still leading.
    /// assert!(matches!(leadership.hand_over(None).await, Err(HandOverError::NoCandidate)));
    /// assert!(leadership.is_active());
    ///
    /// let bravo = Elections::with_killer(storage, RecordingKiller::new());
    /// let (b, k) = (bravo.clone(), key.clone());
    /// let waiting = tokio::spawn(async move { b.campaign(&k, "bravo", d).await });
    /// while leadership.candidates().await?.is_empty() {
    ///     tokio::time::sleep(Duration::from_millis(100)).await;
    /// }
    /// let to = leadership.hand_over(None).await?;
    /// assert_eq!(to.value, b"bravo");
    /// let successor = waiting.await??;
    /// assert!(successor.fencing_token() > leadership.fencing_token());
    /// # Ok(()) }
    /// ```
    ///
    /// # Errors
    ///
    /// See [`HandOverError`].
    pub async fn hand_over(&self, to: Option<&Candidate>) -> Result<Candidate, HandOverError> {
        if let Some(reason) = self.end_reason() {
            return Err(HandOverError::Ended(reason));
        }
        let listed = self.candidates().await?;
        let candidate = match to {
            Some(to) => listed
                .into_iter()
                .find(|c| c.id == to.id)
                .ok_or_else(|| HandOverError::NoSuchCandidate(to.id.clone()))?,
            None => listed
                .into_iter()
                .next()
                .ok_or(HandOverError::NoCandidate)?,
        };
        self.owner
            .hand_over_held(&self.key, &self.record, &candidate)
            .await?;
        Ok(candidate)
    }

    /// [`hand_over`](Self::hand_over), except that with no candidate it
    /// releases the leadership ([`Leadership::release`]) instead of
    /// refusing, and returns `None`.
    ///
    /// # Errors
    ///
    /// As [`hand_over`](Self::hand_over), never
    /// [`HandOverError::NoCandidate`].
    pub async fn hand_over_or_release(
        &self,
        to: Option<&Candidate>,
    ) -> Result<Option<Candidate>, HandOverError> {
        match self.hand_over(to).await {
            Ok(candidate) => Ok(Some(candidate)),
            Err(HandOverError::NoCandidate) => {
                self.clone().release().await;
                Ok(None)
            }
            Err(err) => Err(err),
        }
    }
}

impl Elections {
    /// The hand-over of the held leadership `record` of `key` to `candidate`.
    async fn hand_over_held(
        &self,
        key: &Key,
        record: &[u8],
        candidate: &Candidate,
    ) -> Result<(), HandOverError> {
        let Some(mut entry) = self.take_entry(key, record) else {
            return Err(HandOverError::Ended(EndReason::Released));
        };
        if !entry.end.end(EndReason::Superseded)
            && let Some(reason) = entry.end.reason()
        {
            // Lost just before: an ordinary release (after the work stops).
            self.finish_release(key, entry).await;
            return Err(HandOverError::Ended(reason));
        }
        entry.stop_work_and_renewal().await;
        let marker = marker(&candidate.id);
        let ttl = marker_ttl(entry.timing.duration());
        let written = self
            .write_marker(key, &entry.record, &marker, ttl, entry.timing)
            .await;
        // The work has stopped, whatever the swap did.
        entry.killer.disarm();
        match written {
            Ok(true) => {
                telemetry::released(key, &EndReason::Superseded);
                tracing::info!(%key, candidate = %candidate.id, "leadership handed over");
                // Wake the candidate: its watch sees its record go.
                let storage = self.inner_storage();
                if let Ok(slot) = candidates::slot_key(key, candidate.slot) {
                    let _ = timed(
                        entry.timing.call_timeout(),
                        storage.compare_and_delete(&slot, &candidate.record),
                    )
                    .await;
                }
                Ok(())
            }
            Ok(false) => Err(HandOverError::Ended(EndReason::Stolen { by: None })),
            Err(err) => {
                self.withdraw_record(key, &entry.record, entry.timing).await;
                Err(HandOverError::Storage(err))
            }
        }
    }

    /// Swaps `record` for `marker`: `Ok(true)` when the marker is in
    /// place, `Ok(false)` when the record was no longer ours.
    async fn write_marker(
        &self,
        key: &Key,
        record: &[u8],
        marker: &[u8],
        ttl: Ttl,
        timing: crate::timing::Timing,
    ) -> Result<bool, StorageError> {
        let storage = self.inner_storage();
        let limit = timing.call_timeout();
        let mut last = None;
        for _ in 0..3 {
            match timed(limit, storage.compare_and_swap(key, record, marker, ttl)).await {
                Ok(swapped) => return Ok(swapped),
                Err(err) if err.kind() == ErrorKind::Permanent => return Err(err),
                Err(err) => {
                    tracing::warn!(%key, error = %err, "hand-over write failed; reading back");
                    match timed(limit, storage.get(key)).await {
                        Ok(Some(current)) if current == marker => return Ok(true),
                        Ok(Some(current)) if current != record => return Ok(false),
                        Ok(None) => return Ok(false),
                        _ => {}
                    }
                    last = Some(err);
                    tokio::time::sleep(timing.retry_interval()).await;
                }
            }
        }
        Err(last.unwrap_or_else(|| StorageError::transient("hand-over write failed")))
    }
}
