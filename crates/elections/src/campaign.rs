//! [`Elections::campaign`]: wait until this instance leads a key.

use std::{sync::Arc, time::Duration};

use ttl_storage::{ErrorKind, Key, TtlStorage};

use crate::{
    Elections, ElectionsError, Leadership, candidates::Candidacy, fencing::timed, handover,
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
    /// logged and retried; cancel the future to stop waiting.
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
        let value = value.as_ref();
        let timing = Timing::new(duration)?;
        let pause = poll_interval(timing);
        let limit = timing.call_timeout();
        let storage = self.inner_storage();
        let (instance, counter) = self.next_nonce();
        let mut candidacy = WithdrawOnDrop {
            storage: storage.clone(),
            candidacy: Candidacy::new(instance, counter, value, duration),
        };
        let result = loop {
            let look = timed(limit, storage.get(key)).await;
            let failed = match look {
                Ok(None) => self.acquire_from(key, value, duration, None).await,
                Ok(Some(record)) => match handover::marker_target(&record) {
                    Some(target) if target == candidacy.candidacy.id.0.as_bytes() => {
                        tracing::info!(%key, "the key was handed over to us; taking it");
                        self.acquire_from(key, value, duration, Some(&record)).await
                    }
                    _ => Ok(None),
                },
                Err(err) => Err(err.into()),
            };
            let trouble = match failed {
                Ok(Some(leadership)) => break Ok(leadership),
                Ok(None) => false,
                Err(ElectionsError::Storage(err)) if err.kind() != ErrorKind::Permanent => {
                    tracing::warn!(%key, error = %err, "campaign: store error; retrying");
                    true
                }
                Err(err) => break Err(err),
            };
            candidacy.candidacy.keep_up(&*storage, key, limit).await;
            if trouble {
                tokio::time::sleep(pause).await;
                continue;
            }
            let slot_watch = candidacy
                .candidacy
                .slot_key()
                .and_then(|slot| storage.watch(slot).ok());
            let key_watch = storage.watch(key).ok();
            tokio::select! {
                () = optional(key_watch) => {}
                // Our record may be gone (a hand-over's wake-up, or expiry):
                // check it at the next round, or this watch fires at once.
                () = optional(slot_watch) => candidacy.candidacy.check_soon(),
                () = tokio::time::sleep(pause) => {}
            }
        };
        // No await between the acquisition and the return: a caller that
        // cancels the campaign (a timeout) must never lose a leadership it
        // already holds. The candidacy is withdrawn in the background.
        drop(candidacy);
        result
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
}

impl Drop for WithdrawOnDrop {
    fn drop(&mut self) {
        let Some((slot, record)) = self.candidacy.take_slot() else {
            return;
        };
        let storage = self.storage.clone();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                let _ = timed(
                    Duration::from_secs(2),
                    storage.compare_and_delete(&slot, &record),
                )
                .await;
            });
        }
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
