//! [`UrlError`]: what can be wrong with any driver's storage URL, said the
//! same way by every driver.

/// The part of a driver's configuration error that every network driver
/// shares: the URL's syntax and scheme, percent-encoding, parameters given
/// twice or unknown, and boolean and duration values. Each driver's own
/// `ConfigError` wraps it (`ConfigError::Url`) beside its own causes.
///
/// ```
/// use ttl_storage::kit::UrlError;
///
/// let err = UrlError::DuplicateParameter("timeout".into());
/// assert_eq!(err.to_string(), "URL parameter \"timeout\" given twice");
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum UrlError {
    /// The text is not a URL.
    #[error("not a URL: {0}")]
    NotAUrl(String),
    /// The scheme is none of the driver's.
    #[error("URL scheme {scheme:?} is not {expected}")]
    BadScheme {
        /// The scheme given.
        scheme: String,
        /// The driver's schemes, as prose (`"etcd:// or etcds://"`).
        expected: &'static str,
    },
    /// A part of the URL (`"user name"`, `"password"`, ...) is not valid
    /// percent-encoded UTF-8.
    #[error("the {0} in the URL is not valid percent-encoded UTF-8")]
    BadPercentEncoding(&'static str),
    /// A query parameter the driver does not know.
    #[error("unknown URL parameter {0:?}")]
    UnknownParameter(String),
    /// A query parameter given twice that may be given once.
    #[error("URL parameter {0:?} given twice")]
    DuplicateParameter(String),
    /// A parameter that takes `true` or `false`.
    #[error("bad {name} {value:?}: expected true or false")]
    BadBool {
        /// The parameter.
        name: &'static str,
        /// The value given.
        value: String,
    },
    /// A parameter that takes a duration, or a duration out of the range
    /// the driver allows.
    #[error("bad {name} {value:?}: expected a duration such as 500ms or 5s, from 1ms to 1h")]
    BadDuration {
        /// The parameter.
        name: &'static str,
        /// The value given.
        value: String,
    },
    /// A parameter that takes a positive whole number of milliseconds (the
    /// older `_ms` forms some drivers keep).
    #[error("bad {name} {value:?}: expected a positive whole number of milliseconds, such as 500")]
    BadMillis {
        /// The parameter.
        name: &'static str,
        /// The value given.
        value: String,
    },
}
