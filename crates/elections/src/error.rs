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
    /// The key lies in the namespace reserved for fencing counters.
    #[error("key {0} is reserved for fencing counters (prefix {prefix})", prefix = crate::fencing::FENCING_PREFIX)]
    ReservedKey(Key),
    /// The value starts with the prefix reserved for hand-over markers (a
    /// NUL byte followed by `elections/`).
    #[error("values starting with \"\\0elections/\" are reserved for hand-over markers")]
    ReservedValue,
    /// Bad duration, value or key.
    #[error("invalid input: {0}")]
    Invalid(#[from] ValidationError),
    /// The storage failed in a way the election could not resolve.
    #[error(transparent)]
    Storage(#[from] StorageError),
}
