//! Acquisition: the insert (or the taking of a hand-over marker), the
//! fencing token, the confirming write, and the shared claim.

use std::{
    sync::{Arc, atomic::Ordering},
    time::Duration,
};

use tokio::time::Instant;
use tracing::Instrument;
use ttl_storage::{
    Counted, CountedWrite, ErrorKind, Key, StorageError, Ttl, TtlStorage, check_value,
};

use super::{Elections, Reservation};
use crate::{
    ElectionsError, Leadership,
    claim::{Found, SharedClaim},
    fencing::{self, timed},
    record, telemetry,
    timing::Timing,
};

/// Inserts of one acquisition whose outcome stays unknown (each followed by
/// a read-back) before it gives up.
const UNKNOWN_INSERT_ATTEMPTS: u32 = 3;

impl Elections {
    /// Checks a lease key: not in the reserved namespace, and every key
    /// derived from it valid ([`crate::keys`]).
    pub(crate) fn check_key(key: &Key) -> Result<(), ElectionsError> {
        if fencing::is_reserved(key) || crate::keys::is_reserved(key) {
            return Err(ElectionsError::ReservedKey(key.clone()));
        }
        crate::keys::check(key)?;
        Ok(())
    }

    /// [`acquire_leadership`](Self::acquire_leadership), or, with `marker`,
    /// the taking of a hand-over marker: the first write is then
    /// `compare_and_swap(marker -> record)` instead of an insert. With
    /// `claim`, the shared claim is taken after the lease and renewed with
    /// it ([`crate::claim`]).
    pub(crate) async fn acquire_from(
        &self,
        key: &Key,
        value: &[u8],
        duration: Duration,
        marker: Option<&[u8]>,
        claim: Option<&SharedClaim>,
    ) -> Result<Option<Leadership>, ElectionsError> {
        let timing = Timing::new(duration)?;
        self.inner.load.admit()?;
        if value.starts_with(crate::handover::RESERVED_PREFIX) {
            return Err(ElectionsError::ReservedValue);
        }
        let counter_value = self.inner.acquisitions.fetch_add(1, Ordering::Relaxed);
        let value: Arc<[u8]> = record::encode(value, self.inner.instance, counter_value).into();
        check_value(&value)?;
        Self::check_key(key)?;
        let counter = fencing::counter_key(key)?;
        let reservation = Reservation::take(&self.inner, key)?;
        let span = tracing::info_span!("acquire_leadership", %key);
        let acquired = self
            .try_acquire(key, &counter, &value, timing, marker)
            .instrument(span.clone())
            .await
            .inspect_err(|_| telemetry::attempt(key, "error"))?;
        let Some((fencing_token, lease_start)) = acquired else {
            telemetry::attempt(key, "held_by_other");
            return Ok(None);
        };
        if let Some(claim) = claim {
            self.take_claim(key, &value, timing, claim)
                .instrument(span.clone())
                .await
                .inspect_err(|_| telemetry::attempt(key, "error"))?;
        }
        self.install(
            reservation,
            value,
            timing,
            fencing_token,
            lease_start,
            claim.cloned(),
        )
        .instrument(span)
        .await
    }

    /// Takes the shared claim right after the lease was confirmed; on a
    /// conflict or a store error the lease is withdrawn (nothing ran under
    /// it) and the acquisition fails.
    async fn take_claim(
        &self,
        key: &Key,
        value: &[u8],
        timing: Timing,
        claim: &SharedClaim,
    ) -> Result<(), ElectionsError> {
        let storage = &*self.inner.storage;
        let taken = claim
            .take(
                storage,
                timing.ttl(),
                timing.call_timeout(),
                timing.retry_interval(),
            )
            .await;
        let err = match taken {
            Ok(Found::Ours) => return Ok(()),
            Ok(Found::Other(found)) => {
                tracing::warn!(claim = %claim.key(), "the shared claim holds another value; giving the lease back");
                ElectionsError::ClaimConflict {
                    claim: claim.key().clone(),
                    found: found.unwrap_or_default(),
                }
            }
            Err(err) => {
                tracing::warn!(claim = %claim.key(), error = %err, "cannot take the shared claim; giving the lease back");
                ElectionsError::Storage(err)
            }
        };
        self.withdraw_record(key, value, timing).await;
        Err(err)
    }

    async fn try_acquire(
        &self,
        key: &Key,
        counter: &Key,
        value: &[u8],
        timing: Timing,
        marker: Option<&[u8]>,
    ) -> Result<Option<(u64, Instant)>, ElectionsError> {
        let storage = &*self.inner.storage;
        let limit = timing.call_timeout();
        // An insert whose outcome is unknown may still land after a read-back
        // found the key empty (a Paxos round the database keeps retrying):
        // then nobody would hold the record until it expired. So an empty
        // read-back is answered by inserting the same unique value again: if
        // the first insert lands meanwhile, the retry fails and the read-back
        // finds our own value.
        //
        // The first attempt is one write where the driver can: the record
        // and the fencing counter's advance together
        // ([`TtlStorage::write_counted`]). Its lease counts from the start
        // of that write, like a confirmation's. Any other answer than
        // "written" continues as below: the plain writes, and after an
        // unknown outcome the read-back, then the token and the confirming
        // write (a counter advanced by a write that did land leaves a gap).
        let mut attempts = 0;
        loop {
            attempts += 1;
            let inserted = if attempts == 1 {
                let started = Instant::now();
                let write = CountedWrite {
                    key,
                    expected: marker,
                    value,
                    ttl: timing.ttl(),
                    counter,
                    floor: fencing::floor(),
                    max: fencing::MAX_TOKEN,
                };
                match timed(limit, storage.write_counted(write)).await {
                    Ok(Counted::Written(token)) => {
                        tracing::info!(fencing_token = token, "leadership acquired");
                        return Ok(Some((token, started)));
                    }
                    Ok(Counted::Refused) => Ok(false),
                    Ok(_) => plain_write(storage, key, value, timing, marker).await,
                    Err(err) => Err(err),
                }
            } else {
                plain_write(storage, key, value, timing, marker).await
            };
            let err = match inserted {
                Ok(true) => break,
                Ok(false) if attempts == 1 => return Ok(None),
                Err(err) if err.kind() == ErrorKind::OutcomeUnknown => {
                    tracing::warn!(error = %err, attempts, "insert outcome unknown; reading the record back");
                    err
                }
                // A retry found the key taken: maybe by our earlier write.
                Ok(false) => StorageError::outcome_unknown("an earlier write may have landed"),
                Err(err) => return Err(err.into()),
            };
            match timed(limit, storage.get(key)).await {
                Ok(Some(current)) if *current == *value => break,
                Ok(Some(_)) => return Ok(None),
                Ok(None) if attempts < UNKNOWN_INSERT_ATTEMPTS => {
                    tokio::time::sleep(timing.retry_interval()).await;
                }
                Ok(None) => {
                    tracing::warn!("insert still unknown after {attempts} attempts; withdrawing");
                    self.withdraw_record(key, value, timing).await;
                    return Err(err.into());
                }
                Err(read_err) => {
                    tracing::warn!(error = %read_err, "read-back failed; withdrawing");
                    self.withdraw_record(key, value, timing).await;
                    return Err(err.into());
                }
            }
        }

        let token =
            match fencing::next_token(storage, counter, limit, timing.retry_interval()).await {
                Ok(token) => token,
                Err(err) => {
                    tracing::warn!(error = %err, "could not take a fencing token; withdrawing");
                    self.withdraw_record(key, value, timing).await;
                    return Err(err.into());
                }
            };

        let lease_start = Instant::now();
        match timed(
            limit,
            storage.compare_and_swap(key, value, value, timing.ttl()),
        )
        .await
        {
            Ok(true) => {
                tracing::info!(fencing_token = token, "leadership acquired");
                Ok(Some((token, lease_start)))
            }
            Ok(false) => {
                tracing::warn!("record lost between insert and confirmation; not leading");
                Ok(None)
            }
            Err(err) => {
                tracing::warn!(error = %err, "confirmation failed; withdrawing");
                self.withdraw_record(key, value, timing).await;
                Err(err.into())
            }
        }
    }
}

/// The record's first write without the counter: an insert, or with
/// `marker` the taking of a hand-over marker.
async fn plain_write(
    storage: &dyn TtlStorage,
    key: &Key,
    value: &[u8],
    timing: Timing,
    marker: Option<&[u8]>,
) -> Result<bool, StorageError> {
    let ttl: Ttl = timing.ttl();
    let limit = timing.call_timeout();
    match marker {
        None => timed(limit, storage.insert_if_not_exists(key, value, ttl)).await,
        Some(marker) => timed(limit, storage.compare_and_swap(key, marker, value, ttl)).await,
    }
}
