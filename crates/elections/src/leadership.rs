//! The handle a leader holds.

use std::{
    fmt,
    sync::{Arc, OnceLock},
    time::Duration,
};

use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};
use ttl_storage::Key;

/// Why a leadership ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum EndReason {
    /// The owner released it ([`crate::Elections::release_leadership`] or
    /// [`crate::Elections::cleanup`]).
    Released,
    /// It was lost; the killer stays armed until the owner releases the key.
    Lost(LossCause),
}

/// Why a leadership was lost.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LossCause {
    /// A renewal found the record absent or holding another value.
    Taken,
    /// Every renewal attempt of a round failed; the last error is kept.
    RenewalFailed {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error, as text.
        last_error: String,
    },
    /// The [`crate::Elections`] was dropped without `cleanup`; renewal stopped.
    ElectionsDropped,
}

impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Released => f.write_str("released"),
            EndReason::Lost(LossCause::Taken) => {
                f.write_str("lost: the record was taken or deleted")
            }
            EndReason::Lost(LossCause::RenewalFailed {
                attempts,
                last_error,
            }) => write!(
                f,
                "lost: {attempts} renewal attempts failed, last: {last_error}"
            ),
            EndReason::Lost(LossCause::ElectionsDropped) => {
                f.write_str("lost: the elections object was dropped")
            }
        }
    }
}

/// The end signal of one leadership, shared by the handle and the renewal task.
#[derive(Clone, Default)]
pub(crate) struct EndSignal {
    token: CancellationToken,
    reason: Arc<OnceLock<EndReason>>,
}

impl EndSignal {
    /// Records `reason` (the first one wins) and fires the token.
    pub(crate) fn end(&self, reason: EndReason) {
        let _ = self.reason.set(reason);
        self.token.cancel();
    }
}

/// A held leadership: the key, the fencing token, and a signal that fires
/// when leadership is lost or released.
///
/// Cheap to clone. Dropping it changes nothing: leadership ends only by
/// loss, [`crate::Elections::release_leadership`] or
/// [`crate::Elections::cleanup`].
#[derive(Clone)]
pub struct Leadership {
    pub(crate) key: Key,
    pub(crate) record: Arc<[u8]>,
    pub(crate) fencing_token: u64,
    pub(crate) duration: Duration,
    pub(crate) end: EndSignal,
}

impl Leadership {
    /// The election key.
    pub fn key(&self) -> &Key {
        &self.key
    }

    /// The value this leader gave to `acquire_leadership`.
    pub fn value(&self) -> &[u8] {
        crate::record::leader_value(&self.record)
    }

    /// The exact bytes stored in the record: the value and this
    /// leadership's unique nonce (see [`crate::record`]).
    pub fn record_value(&self) -> &[u8] {
        &self.record
    }

    /// The fencing token: strictly greater than every token issued before
    /// for this key, by any process. Pass it with every write to a guarded
    /// resource, which must reject tokens lower than the highest it has seen.
    pub fn fencing_token(&self) -> u64 {
        self.fencing_token
    }

    /// The leadership duration (the record's TTL).
    pub fn duration(&self) -> Duration {
        self.duration
    }

    /// A token cancelled when leadership is lost or released. Child tokens
    /// of it are a convenient shutdown signal for work done as leader.
    pub fn cancellation_token(&self) -> CancellationToken {
        self.end.token.clone()
    }

    /// Completes when leadership is lost or released.
    pub fn ended(&self) -> WaitForCancellationFuture<'_> {
        self.end.token.cancelled()
    }

    /// True until leadership is lost or released.
    pub fn is_active(&self) -> bool {
        !self.end.token.is_cancelled()
    }

    /// Why leadership ended, once it has.
    pub fn end_reason(&self) -> Option<EndReason> {
        if self.is_active() {
            return None;
        }
        self.end.reason.get().cloned()
    }
}

impl fmt::Debug for Leadership {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Leadership")
            .field("key", &self.key)
            .field("fencing_token", &self.fencing_token)
            .field("duration", &self.duration)
            .field("end_reason", &self.end_reason())
            .finish()
    }
}
