//! Errors of the elections API.

use ttl_storage::{Key, StorageError, ValidationError};

/// Why an elections call failed. "Someone else leads" is not an error: it is
/// `Ok(None)` from [`crate::Elections::acquire_leadership`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ElectionsError {
    /// [`crate::Elections::cleanup`] has run; no new leadership can be acquired.
    #[error("elections have been cleaned up; no new leadership can be acquired")]
    Finalized,
    /// This elections instance already holds (or is acquiring) this key.
    #[error("this elections instance already holds or is acquiring key {0}")]
    AlreadyHeld(Key),
    /// The key lies in the namespace reserved for the library's own
    /// records (it starts with `__`: fencing counters, candidates, ...; see
    /// [`crate::keys`]).
    #[error("key {0} lies in the namespace reserved for the library's records (keys starting with {prefix:?})", prefix = crate::keys::RESERVED)]
    ReservedKey(Key),
    /// The leadership's shared claim ([`crate::SharedClaim`]) holds another
    /// value: leaders of another group hold it. The lease was given back;
    /// nothing ran under it.
    #[error(
        "the shared claim {claim} holds {:?}, not this leader's value",
        String::from_utf8_lossy(found)
    )]
    ClaimConflict {
        /// The claim's key.
        claim: Key,
        /// The value it holds.
        found: Vec<u8>,
    },
    /// The value starts with the prefix reserved for hand-over markers (a
    /// NUL byte followed by `elections/`).
    #[error("values starting with \"\\0elections/\" are reserved for hand-over markers")]
    ReservedValue,
    /// Renewals of the leaderships this instance holds are falling behind
    /// (a round finished `lag` after its schedule, more than a tenth of its
    /// lease): new acquisitions are refused, without a store call, so that
    /// the held ones keep their leases ([`crate::load`]). Try again after
    /// `retry_after`; a campaign waits and retries by itself.
    #[error(
        "renewals are falling behind (a round finished {} ms late): no new leadership is started for {} ms",
        lag.as_millis(),
        retry_after.as_millis()
    )]
    Overloaded {
        /// How late the renewal round that started the shedding finished.
        lag: std::time::Duration,
        /// How long acquisitions will still be refused.
        retry_after: std::time::Duration,
    },
    /// Bad duration, value or key.
    #[error("invalid input: {0}")]
    Invalid(#[from] ValidationError),
    /// The storage failed in a way the election could not resolve.
    #[error(transparent)]
    Storage(#[from] StorageError),
}
