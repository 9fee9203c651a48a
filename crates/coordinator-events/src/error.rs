//! The crate's error type.

/// What can go wrong subscribing or publishing.
#[derive(Clone, Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// A setting is out of range.
    #[error("invalid events configuration: {0}")]
    InvalidConfig(String),
    /// An event's payload is larger than [`crate::EventsConfig::max_payload`].
    #[error("event payload of {size} bytes is over the limit of {limit} bytes")]
    TooLarge {
        /// The payload's size.
        size: usize,
        /// The configured limit.
        limit: usize,
    },
    /// This pod already holds as many subscribers, or subscribed
    /// destinations, as it is configured for.
    #[error("subscriber limit reached: {0}")]
    TooManySubscribers(&'static str),
    /// Valkey could not be reached or answered with an error (a publish
    /// whose answer was lost may or may not have been delivered).
    #[error("valkey: {0}")]
    Valkey(#[from] fred::error::Error),
    /// Valkey answered with something this crate did not expect.
    #[error("unexpected reply from valkey: {0}")]
    Protocol(String),
    /// The pod did not receive its own subscription mark in time: the
    /// broadcast channel is not working for this destination.
    #[error("subscribing to {0} timed out")]
    Timeout(String),
    /// The events were shut down.
    #[error("events are shut down")]
    Closed,
    /// An error from the coordinator crate (ids, key prefix).
    #[error(transparent)]
    Coordinator(#[from] coordinator::Error),
}

/// Result alias for this crate.
pub type Result<T, E = Error> = std::result::Result<T, E>;
