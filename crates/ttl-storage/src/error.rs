//! The one error type of the storage contract.

use std::time::Duration;

/// A boxed error from a driver's underlying client, kept as the source.
pub type BoxError = Box<dyn std::error::Error + Send + Sync + 'static>;

/// What the caller of a storage operation may do after an error.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ErrorKind {
    /// The operation was not applied, and retrying it may succeed
    /// (connection refused, node unavailable, throttled, overloaded).
    Transient,
    /// The operation was not applied and retrying will not help until
    /// someone changes something (bad input, configuration, auth, schema).
    Permanent,
    /// A conditional write may or may not have been applied: the request
    /// reached the store but its answer was lost (a Cassandra LWT write
    /// timeout, a DynamoDB request timed out after sending). The caller must
    /// resolve the outcome, for instance by reading the record back.
    OutcomeUnknown,
}

/// Bad input, rejected before anything reaches the store.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ValidationError {
    /// The key is empty.
    #[error("key is empty")]
    EmptyKey,
    /// The key is longer than [`crate::MAX_KEY_LEN`] bytes.
    #[error("key is {len} bytes long; the limit is {max}")]
    KeyTooLong {
        /// Length of the rejected key in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The key contains a control character (they break logs and some stores).
    #[error("key contains a control character at byte {index}")]
    KeyControlChar {
        /// Byte offset of the offending character.
        index: usize,
    },
    /// The value is longer than [`crate::MAX_VALUE_LEN`] bytes.
    #[error("value is {len} bytes long; the limit is {max}")]
    ValueTooLong {
        /// Length of the rejected value in bytes.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The TTL is shorter than one second (zero excepted, which means "never expires").
    #[error("TTL {0:?} is shorter than one second (use Ttl::NEVER for no expiry)")]
    TtlTooShort(Duration),
    /// The TTL is longer than [`crate::MAX_TTL`].
    #[error("TTL {ttl:?} is longer than the maximum {max:?}")]
    TtlTooLong {
        /// The rejected TTL.
        ttl: Duration,
        /// The limit.
        max: Duration,
    },
    /// The TTL is not a whole number of seconds (stores keep TTLs in seconds).
    #[error("TTL {0:?} is not a whole number of seconds")]
    TtlFractional(Duration),
    /// A TTL of zero ("never expires") was given where an expiring one is required.
    #[error("a TTL that never expires is not allowed here")]
    TtlMustExpire,
}

/// The error of every [`crate::TtlStorage`] operation.
///
/// Match on [`StorageError::kind`] to decide what to do; the variants carry the
/// message and the driver's original error as [`std::error::Error::source`].
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StorageError {
    /// Bad input; nothing was sent to the store. Always [`ErrorKind::Permanent`].
    #[error("invalid input: {0}")]
    Invalid(#[from] ValidationError),
    /// Not applied; a retry may succeed.
    #[error("transient storage error: {message}")]
    Transient {
        /// What failed, in words.
        message: String,
        /// The driver's own error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// Not applied; retrying will not help (config, auth, schema, corrupt data).
    #[error("permanent storage error: {message}")]
    Permanent {
        /// What failed, in words.
        message: String,
        /// The driver's own error, if any.
        #[source]
        source: Option<BoxError>,
    },
    /// A conditional write may or may not have been applied.
    #[error("storage outcome unknown: {message}")]
    OutcomeUnknown {
        /// What failed, in words.
        message: String,
        /// The driver's own error, if any.
        #[source]
        source: Option<BoxError>,
    },
}

impl StorageError {
    /// What the caller may do next.
    pub fn kind(&self) -> ErrorKind {
        match self {
            StorageError::Invalid(_) | StorageError::Permanent { .. } => ErrorKind::Permanent,
            StorageError::Transient { .. } => ErrorKind::Transient,
            StorageError::OutcomeUnknown { .. } => ErrorKind::OutcomeUnknown,
        }
    }

    /// A transient error with a message and no source.
    pub fn transient(message: impl Into<String>) -> Self {
        StorageError::Transient {
            message: message.into(),
            source: None,
        }
    }

    /// A permanent error with a message and no source.
    pub fn permanent(message: impl Into<String>) -> Self {
        StorageError::Permanent {
            message: message.into(),
            source: None,
        }
    }

    /// An outcome-unknown error with a message and no source.
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        StorageError::OutcomeUnknown {
            message: message.into(),
            source: None,
        }
    }

    /// An error of `kind` that keeps `source` as its cause.
    pub fn with_source(
        kind: ErrorKind,
        message: impl Into<String>,
        source: impl Into<BoxError>,
    ) -> Self {
        let message = message.into();
        let source = Some(source.into());
        match kind {
            ErrorKind::Transient => StorageError::Transient { message, source },
            ErrorKind::Permanent => StorageError::Permanent { message, source },
            ErrorKind::OutcomeUnknown => StorageError::OutcomeUnknown { message, source },
        }
    }

    /// True when a retry of the same operation may succeed.
    pub fn is_transient(&self) -> bool {
        self.kind() == ErrorKind::Transient
    }

    /// True when the operation may or may not have been applied.
    pub fn is_outcome_unknown(&self) -> bool {
        self.kind() == ErrorKind::OutcomeUnknown
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kinds_are_classified() {
        assert_eq!(StorageError::transient("x").kind(), ErrorKind::Transient);
        assert_eq!(StorageError::permanent("x").kind(), ErrorKind::Permanent);
        assert_eq!(
            StorageError::outcome_unknown("x").kind(),
            ErrorKind::OutcomeUnknown
        );
        assert_eq!(
            StorageError::from(ValidationError::EmptyKey).kind(),
            ErrorKind::Permanent
        );
    }

    #[test]
    fn source_is_kept() {
        let io = std::io::Error::other("boom");
        let err = StorageError::with_source(ErrorKind::OutcomeUnknown, "cas timed out", io);
        assert!(err.is_outcome_unknown());
        let source = std::error::Error::source(&err).map(|s| s.to_string());
        assert_eq!(source.as_deref(), Some("boom"));
        assert_eq!(err.to_string(), "storage outcome unknown: cas timed out");
    }
}
