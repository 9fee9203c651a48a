//! How a leadership ends: the reason ([`EndReason`]) and the signal the
//! handle, the renewal and the killer share.

use std::{
    fmt,
    sync::{Arc, OnceLock},
};

use tokio_util::sync::CancellationToken;

/// Why a leadership ended: [`Leadership::ended`](crate::Leadership::ended) and
/// [`Leadership::end_reason`](crate::Leadership::end_reason) give it, and [`crate::Elections::lead`]
/// returns it when the leadership ended before the work did. The metric
/// label `cause` uses [`EndReason::label`].
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum EndReason {
    /// The owner released it ([`Leadership::release`](crate::Leadership::release),
    /// [`crate::Elections::release_leadership`], [`crate::Elections::cleanup`],
    /// or [`crate::Elections::lead`] once the work returned).
    Released,
    /// The owner handed it over to a candidate ([`Leadership::hand_over`](crate::Leadership::hand_over)).
    Superseded,
    /// A renewal found another value in the record: someone else holds the
    /// key. `by` is that holder's value (without the record's nonce), `None`
    /// when the record could not be read back or holds a hand-over marker.
    Stolen {
        /// The value of whoever holds the record now, when known.
        by: Option<Vec<u8>>,
    },
    /// The lease ran out: the killer deadline passed without a successful
    /// renewal, or a renewal found the record gone (expired on the store, or
    /// deleted).
    Expired,
    /// Every attempt of a renewal round failed with a store error before the
    /// killer deadline passed.
    StoreUnavailable {
        /// Attempts made.
        attempts: u32,
        /// The last attempt's error, as text.
        last_error: String,
    },
    /// A renewal found the leadership's shared claim ([`crate::SharedClaim`])
    /// gone or holding another value: the group this leader belongs to no
    /// longer holds it, so it must stop as on any loss.
    ClaimLost {
        /// The claim's key.
        claim: ttl_storage::Key,
        /// What the claim holds now; `None` when it is gone.
        found: Option<Vec<u8>>,
    },
    /// Every [`crate::Elections`] clone and every [`Leadership`](crate::Leadership) handle was
    /// dropped without a release; renewal stopped and the killer was
    /// disarmed (the record is left to expire).
    ElectionsDropped,
}

impl EndReason {
    /// True for the reasons that are a loss (everything but
    /// [`EndReason::Released`] and [`EndReason::Superseded`]): the killer
    /// stays armed until the owner releases.
    pub fn is_loss(&self) -> bool {
        !matches!(self, EndReason::Released | EndReason::Superseded)
    }

    /// The reason's name in metrics (`cause` label) and logs: `released`,
    /// `superseded`, `stolen`, `expired`, `store_unavailable`, `claim_lost`,
    /// `elections_dropped`.
    pub fn label(&self) -> &'static str {
        match self {
            EndReason::Released => "released",
            EndReason::Superseded => "superseded",
            EndReason::Stolen { .. } => "stolen",
            EndReason::Expired => "expired",
            EndReason::StoreUnavailable { .. } => "store_unavailable",
            EndReason::ClaimLost { .. } => "claim_lost",
            EndReason::ElectionsDropped => "elections_dropped",
        }
    }
}

/// Losses read `lost (<label>): …`, so logs and problem reports say "lost"
/// whatever the cause.
impl fmt::Display for EndReason {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            EndReason::Released => f.write_str("released"),
            EndReason::Superseded => f.write_str("handed over to a candidate"),
            EndReason::Stolen { by: Some(by) } => write!(
                f,
                "lost (stolen): the record was taken by {}",
                String::from_utf8_lossy(by)
            ),
            EndReason::Stolen { by: None } => {
                f.write_str("lost (stolen): the record was taken by another holder")
            }
            EndReason::Expired => f.write_str(
                "lost (expired): the lease ran out (no renewal in time, or the record is gone)",
            ),
            EndReason::StoreUnavailable {
                attempts,
                last_error,
            } => write!(
                f,
                "lost (store unavailable): {attempts} renewal attempts failed, last: {last_error}"
            ),
            EndReason::ClaimLost {
                claim,
                found: Some(found),
            } => write!(
                f,
                "lost (claim lost): the shared claim {claim} now holds {:?}",
                String::from_utf8_lossy(found)
            ),
            EndReason::ClaimLost { claim, found: None } => {
                write!(f, "lost (claim lost): the shared claim {claim} is gone")
            }
            EndReason::ElectionsDropped => {
                f.write_str("lost (elections dropped): every handle was dropped without a release")
            }
        }
    }
}

/// The end signal of one leadership, shared by the handle and its renewal.
#[derive(Clone, Default)]
pub(crate) struct EndSignal {
    pub(crate) token: CancellationToken,
    pub(crate) reason: Arc<OnceLock<EndReason>>,
}

impl EndSignal {
    /// The recorded reason, once ended.
    pub(crate) fn reason(&self) -> Option<EndReason> {
        self.reason.get().cloned()
    }

    /// Records `reason` and fires the token. The first reason wins; returns
    /// true when this call's reason was recorded.
    pub(crate) fn end(&self, reason: EndReason) -> bool {
        let first = self.reason.set(reason).is_ok();
        self.token.cancel();
        first
    }
}
