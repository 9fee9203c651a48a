//! Ending a held leadership: release, and the pieces hand-over shares.

use tracing::Instrument;
use ttl_storage::{ErrorKind, Key};

use super::{Elections, Entry, Slot};
use crate::{end::EndReason, fencing::timed, telemetry, timing::Timing};

impl Elections {
    /// Releases the leadership of `key`, in the one safe order: fires the
    /// handle ([`EndReason::Released`], which cancels the work's tokens),
    /// waits until every task spawned with [`Leadership::spawn`](crate::Leadership::spawn) has ended
    /// (renewal goes on meanwhile if the lease is still held; after a loss
    /// the armed killer bounds the wait), then stops renewal, disarms the
    /// killer and deletes the record (if it still holds this leader's value).
    ///
    /// Work the owner runs outside [`Leadership::spawn`](crate::Leadership::spawn) (its own tasks, a
    /// detached `tokio::spawn`) is outside that guarantee: call this only
    /// once such work has stopped, or use [`Elections::lead`], which makes
    /// the order structural. Releasing a key this instance does not hold is
    /// a no-op. Works after a loss too (that is how the owner disarms the
    /// killer).
    pub async fn release_leadership(&self, key: &Key) {
        self.release_matching(key, None).await;
    }

    /// Releases `key` if this instance holds it, and, when `record` is
    /// given, only if the held leadership is that one (so a stale handle
    /// never releases a later leadership of the same key).
    pub(crate) async fn release_matching(&self, key: &Key, record: Option<&[u8]>) {
        let entry = {
            let mut state = self.inner.lock();
            match state.slots.get(key) {
                Some(Slot::Held(entry)) if record.is_none_or(|record| *entry.record == *record) => {
                }
                _ => return,
            }
            match state.slots.remove(key) {
                Some(Slot::Held(entry)) => entry,
                _ => return,
            }
        };
        self.release_entry(key, entry).await;
    }

    /// Removes the held leadership `record` of `key` from this instance's
    /// slots (the caller ends it).
    pub(crate) fn take_entry(&self, key: &Key, record: &[u8]) -> Option<Entry> {
        let mut state = self.inner.lock();
        match state.slots.get(key) {
            Some(Slot::Held(entry)) if *entry.record == *record => {}
            _ => return None,
        }
        match state.slots.remove(key) {
            Some(Slot::Held(entry)) => Some(entry),
            _ => None,
        }
    }

    pub(super) async fn release_entry(&self, key: &Key, entry: Entry) {
        entry.end.end(EndReason::Released);
        telemetry::released(key, &EndReason::Released);
        self.finish_release(key, entry).await;
    }

    /// The release after the end signal fired: the work stops, then
    /// renewal, then the killer is disarmed and the record deleted.
    pub(crate) async fn finish_release(&self, key: &Key, mut entry: Entry) {
        let span = tracing::info_span!("release_leadership", %key);
        async {
            entry.stop_work_and_renewal().await;
            // The owner's work has stopped: nothing is left for the killer to
            // stop, so disarm it *before* the delete, which may take up to two
            // call timeouts on a failing store.
            entry.killer.disarm();
            self.withdraw_record(key, &entry.record, entry.timing).await;
            tracing::info!("leadership released");
        }
        .instrument(span)
        .await;
    }

    /// Best-effort compare-and-delete; if it fails the record expires by itself.
    pub(crate) async fn withdraw_record(&self, key: &Key, value: &[u8], timing: Timing) {
        const ATTEMPTS: u32 = 2;
        for attempt in 1..=ATTEMPTS {
            match timed(
                timing.call_timeout(),
                self.inner.storage.compare_and_delete(key, value),
            )
            .await
            {
                Ok(_) => return,
                Err(err) if err.kind() == ErrorKind::Permanent => {
                    tracing::warn!(error = %err, "could not delete the record; it will expire");
                    return;
                }
                Err(err) if attempt < ATTEMPTS => {
                    tracing::warn!(attempt, error = %err, "could not delete the record; retrying");
                    tokio::time::sleep(timing.retry_interval()).await;
                }
                Err(err) => {
                    tracing::warn!(attempt, error = %err, "could not delete the record; it will expire");
                }
            }
        }
    }
}
