//! The crate's error type.

/// Everything that can go wrong talking to Valkey or validating inputs.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An id (member, destination, lock or request id) is malformed.
    #[error("invalid {kind} id: {reason}")]
    InvalidId {
        /// Which kind of id was rejected.
        kind: &'static str,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A member address is not a plain `http://host:port` URL.
    #[error("invalid member address {address:?}: {reason}")]
    InvalidAddress {
        /// The rejected address.
        address: String,
        /// Why it was rejected.
        reason: &'static str,
    },
    /// A configuration value is out of range or inconsistent.
    #[error("invalid configuration: {0}")]
    InvalidConfig(String),
    /// Valkey answered with an error, or could not be reached.
    #[error("valkey: {0}")]
    Valkey(#[from] fred::error::Error),
    /// Another member owns a lock record with this id (the lock id's
    /// text: this module names no other module of the crate, so that the
    /// id types can build their own errors).
    #[error("lock {0} is owned by another member")]
    LockTaken(String),
    /// A component was used after it was shut down.
    #[error("{0} is closed")]
    Closed(&'static str),
    /// Valkey answered with something this crate did not expect.
    #[error("unexpected reply from valkey: {0}")]
    Protocol(String),
}

impl From<http_edge::ServeError> for Error {
    fn from(err: http_edge::ServeError) -> Self {
        match err {
            http_edge::ServeError::InvalidConfig(reason) => Error::InvalidConfig(reason),
            other => Error::InvalidConfig(other.to_string()),
        }
    }
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
