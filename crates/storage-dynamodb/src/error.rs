//! Configuration errors, found before connecting. (Errors of operations
//! are classified in `classify.rs`, connection errors in `table.rs`.)

use std::time::Duration;

/// A configuration that failed validation.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// What every driver's URL can have wrong (syntax, scheme,
    /// percent-encoding, parameters unknown or given twice, values).
    #[error(transparent)]
    Url(#[from] ttl_storage::kit::UrlError),
    /// The table name breaks DynamoDB's rules (3..=255 of `[A-Za-z0-9_.-]`).
    #[error("invalid table name {0:?}: use 3 to 255 characters of A-Z a-z 0-9 _ - .")]
    InvalidTable(String),
    /// The region is empty or has characters no region has.
    #[error("invalid region {0:?}")]
    InvalidRegion(String),
    /// The endpoint is not an `http://` or `https://` URL with a host.
    #[error("invalid endpoint {0:?}: expected http(s)://host[:port]")]
    InvalidEndpoint(String),
    /// A query parameter whose value does not parse.
    #[error("URL parameter {name:?} has invalid value {value:?}: {expected}")]
    InvalidParameter {
        /// Parameter name.
        name: String,
        /// The rejected value.
        value: String,
        /// What was expected.
        expected: &'static str,
    },
    /// A timeout of zero or over ten minutes.
    #[error("{name} must be between 1 ms and 10 min, got {value:?}")]
    InvalidTimeout {
        /// Which timeout.
        name: &'static str,
        /// The rejected value.
        value: Duration,
    },
    /// `max_attempts` of zero or over ten.
    #[error("max_attempts must be 1..=10, got {0}")]
    InvalidMaxAttempts(u32),
    /// Explicit credentials with an empty access key id or secret.
    #[error("explicit credentials need a non-empty access key id and secret access key")]
    InvalidCredentials,
}
