//! Storage URLs of the plain `scheme://[userinfo@]host[:port]/...` form.

/// `raw` with its `host:port` replaced by `addr` (`host:port`); `None` if
/// `raw` is not a URL with a host or `addr` is not `host:port`. The user
/// info, path and query are kept.
///
/// ```
/// use ttl_storage::kit::url::replace_host_and_port;
///
/// assert_eq!(
///     replace_host_and_port("rediss://app:pw@cache.internal/2", "127.0.0.1:7001").as_deref(),
///     Some("rediss://app:pw@127.0.0.1:7001/2"),
/// );
/// assert_eq!(replace_host_and_port("rediss://h/2", "no-port"), None);
/// ```
pub fn replace_host_and_port(raw: &str, addr: &str) -> Option<String> {
    let (host, port) = addr.rsplit_once(':')?;
    let port: u16 = port.parse().ok()?;
    let mut url = ::url::Url::parse(raw).ok()?;
    url.set_host(Some(host)).ok()?;
    url.set_port(Some(port)).ok()?;
    Some(url.to_string())
}

use super::UrlError;

/// Parses `text` as a URL.
///
/// ```
/// use ttl_storage::kit::{UrlError, url::parse};
///
/// assert!(matches!(parse("not a url"), Err(UrlError::NotAUrl(_))));
/// ```
pub fn parse(text: &str) -> Result<::url::Url, UrlError> {
    ::url::Url::parse(text).map_err(|err| UrlError::NotAUrl(err.to_string()))
}

/// Percent-decodes a part of a URL (`what`: `"user name"`, `"password"`).
///
/// ```
/// use ttl_storage::kit::url::decode;
///
/// assert_eq!(decode("s%40cret", "password").unwrap(), "s@cret");
/// assert!(decode("%ff", "password").is_err());
/// ```
pub fn decode(text: &str, what: &'static str) -> Result<String, UrlError> {
    percent_encoding::percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| UrlError::BadPercentEncoding(what))
}

/// The query parameters of `url` in order, refusing a second value of any
/// parameter not named in `repeatable`. Unknown names are the driver's to
/// refuse ([`UrlError::UnknownParameter`]), as it matches the names.
///
/// ```
/// use ttl_storage::kit::{UrlError, url::{params, parse}};
///
/// let url = parse("etcd://h?endpoint=a&endpoint=b&prefix=p").unwrap();
/// assert_eq!(params(&url, &["endpoint"]).unwrap().len(), 3);
/// let twice = parse("etcd://h?prefix=a&prefix=b").unwrap();
/// assert_eq!(
///     params(&twice, &["endpoint"]),
///     Err(UrlError::DuplicateParameter("prefix".into()))
/// );
/// ```
pub fn params(url: &::url::Url, repeatable: &[&str]) -> Result<Vec<(String, String)>, UrlError> {
    let mut seen = std::collections::HashSet::new();
    let mut params = Vec::new();
    for (name, value) in url.query_pairs() {
        if !repeatable.contains(&name.as_ref()) && !seen.insert(name.to_string()) {
            return Err(UrlError::DuplicateParameter(name.into_owned()));
        }
        params.push((name.into_owned(), value.into_owned()));
    }
    Ok(params)
}
