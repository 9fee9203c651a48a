//! The one error type of fenced writes.

/// A fenced write or setup that failed. After a failed *write* the outcome
/// is unknown (it may have been applied): read the register, or write again
/// with the same token (an equal token is accepted).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum FenceError {
    /// The database refused or did not answer.
    #[error("{what}: {source}")]
    Db {
        /// What was being done.
        what: &'static str,
        /// The driver's error.
        #[source]
        source: Box<dyn std::error::Error + Send + Sync>,
    },
    /// An answer without the expected fields.
    #[error("unexpected answer from the database: {0}")]
    Answer(String),
    /// A keyspace, table or resource name that cannot be used.
    #[error("invalid name {0:?}: use 1 to 48 ASCII letters, digits or _")]
    InvalidName(String),
    /// Tokens are stored as signed 64-bit integers.
    #[error("fencing token {0} does not fit a signed 64-bit integer")]
    TokenTooLarge(u64),
}

#[cfg_attr(
    not(any(feature = "cassandra", feature = "dynamodb")),
    allow(dead_code)
)]
pub(crate) fn db<E: std::error::Error + Send + Sync + 'static>(
    what: &'static str,
) -> impl Fn(E) -> FenceError {
    move |err| FenceError::Db {
        what,
        source: Box::new(err),
    }
}
