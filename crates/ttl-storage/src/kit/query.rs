//! The values of storage URL query parameters, read the same way by every
//! driver; what is wrong is a [`UrlError`], which each driver's own
//! `ConfigError` wraps.

use std::time::Duration;

use super::UrlError;

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

/// The positive duration in whole milliseconds of parameter `name`
/// ([`parse_millis`]), or [`UrlError::BadMillis`] (zero too).
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::query::millis_param;
///
/// assert_eq!(millis_param("timeout_ms", "250"), Ok(Duration::from_millis(250)));
/// assert!(millis_param("timeout_ms", "0").is_err());
/// assert!(millis_param("timeout_ms", "2s").is_err());
/// ```
pub fn millis_param(name: &'static str, value: &str) -> Result<Duration, UrlError> {
    match parse_millis(value) {
        Some(duration) if !duration.is_zero() => Ok(duration),
        _ => Err(UrlError::BadMillis {
            name,
            value: value.to_owned(),
        }),
    }
}

/// The boolean value of parameter `name` ([`parse_bool`]), or
/// [`UrlError::BadBool`].
///
/// ```
/// use ttl_storage::kit::query::bool_param;
///
/// assert_eq!(bool_param("create_schema", "1"), Ok(true));
/// assert!(bool_param("create_schema", "yes").is_err());
/// ```
pub fn bool_param(name: &'static str, value: &str) -> Result<bool, UrlError> {
    parse_bool(value).ok_or_else(|| UrlError::BadBool {
        name,
        value: value.to_owned(),
    })
}

/// The duration value of parameter `name` ([`parse_duration`]), or
/// [`UrlError::BadDuration`].
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::query::duration_param;
///
/// assert_eq!(duration_param("timeout", "2s"), Ok(Duration::from_secs(2)));
/// assert!(duration_param("timeout", "2").is_err());
/// ```
pub fn duration_param(name: &'static str, value: &str) -> Result<Duration, UrlError> {
    parse_duration(value).ok_or_else(|| UrlError::BadDuration {
        name,
        value: value.to_owned(),
    })
}

/// `timeout` if it lies from 1 ms to `max`, else [`UrlError::BadDuration`]
/// naming `name`.
///
/// ```
/// use std::time::Duration;
/// use ttl_storage::kit::query::check_timeout;
///
/// let hour = Duration::from_secs(3600);
/// assert!(check_timeout("timeout", Duration::from_secs(5), hour).is_ok());
/// assert!(check_timeout("timeout", Duration::ZERO, hour).is_err());
/// ```
pub fn check_timeout(name: &'static str, timeout: Duration, max: Duration) -> Result<(), UrlError> {
    if timeout < Duration::from_millis(1) || timeout > max {
        return Err(UrlError::BadDuration {
            name,
            value: humantime::format_duration(timeout).to_string(),
        });
    }
    Ok(())
}
