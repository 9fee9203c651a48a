//! [`Elections::campaign`]: wait until this instance leads a key.

use std::time::Duration;

use ttl_storage::{ErrorKind, Key, TtlStorage};

use crate::{Elections, ElectionsError, Leadership, timing::Timing};

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
    /// Between attempts it waits for the driver's watch
    /// ([`TtlStorage::watch`]) to report that the record may have gone, or
    /// for [`MAX_POLL_INTERVAL`] (a quarter lease if shorter), whichever
    /// comes first. Storage errors that may pass (transient, outcome
    /// unknown) are logged and retried; cancel the future to stop waiting.
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
        let timing = Timing::new(duration)?;
        let pause = poll_interval(timing);
        loop {
            match self.acquire_leadership(key, value.as_ref(), duration).await {
                Ok(Some(leadership)) => return Ok(leadership),
                Ok(None) => {}
                Err(ElectionsError::Storage(err)) if err.kind() != ErrorKind::Permanent => {
                    tracing::warn!(%key, error = %err, "campaign: acquisition failed; retrying");
                }
                Err(err) => return Err(err),
            }
            wait_for_removal(&*self.inner_storage(), key, pause).await;
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
