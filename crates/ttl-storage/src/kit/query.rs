//! The values of storage URL query parameters, read the same way by every
//! driver; each driver says what is wrong in its own error.

use std::time::Duration;

/// `true`/`1` or `false`/`0`; `None` for anything else.
///
/// ```
/// use ttl_storage::kit::query::parse_bool;
///
/// assert_eq!(parse_bool("1"), Some(true));
/// assert_eq!(parse_bool("false"), Some(false));
/// assert_eq!(parse_bool("yes"), None);
/// ```
pub fn parse_bool(value: &str) -> Option<bool> {
    match value {
        "true" | "1" => Some(true),
        "false" | "0" => Some(false),
        _ => None,
    }
}

/// A humantime duration (`750ms`, `5s`, `1m 30s`); `None` if it does not
/// parse. Ranges are the driver's to check.
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::query::parse_duration;
///
/// assert_eq!(parse_duration("1m 30s"), Some(Duration::from_secs(90)));
/// assert_eq!(parse_duration("soon"), None);
/// ```
pub fn parse_duration(value: &str) -> Option<Duration> {
    humantime::parse_duration(value).ok()
}

/// A whole number of milliseconds (the older `_ms` parameters); `None` if
/// it does not parse.
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::query::parse_millis;
///
/// assert_eq!(parse_millis("1500"), Some(Duration::from_millis(1500)));
/// assert_eq!(parse_millis("1.5s"), None);
/// ```
pub fn parse_millis(value: &str) -> Option<Duration> {
    value.parse().ok().map(Duration::from_millis)
}
