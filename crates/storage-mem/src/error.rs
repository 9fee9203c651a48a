//! Errors of configuring a [`MemStorage`](crate::MemStorage).

/// A bad option or `mem` URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// `max_records` was zero.
    #[error("max_records must be at least 1")]
    ZeroMaxRecords,
    /// The URL is not `mem`, `mem://` or `mem://?options`.
    #[error("not a mem URL: {0:?} (expected mem or mem://?max_records=N)")]
    NotMem(String),
    /// The URL names a host, a path, a user or a fragment.
    #[error("a mem URL takes no host, path, user or fragment: {0:?}")]
    Unexpected(String),
    /// An option the URL does not know.
    #[error("unknown mem option {0:?} (known: max_records)")]
    UnknownOption(String),
    /// An option given twice.
    #[error("mem option {0:?} given twice")]
    Repeated(String),
    /// An option whose value does not parse.
    #[error("bad value {value:?} for mem option {name:?}: {reason}")]
    BadValue {
        /// The option.
        name: String,
        /// Its value.
        value: String,
        /// Why it is refused.
        reason: String,
    },
}
