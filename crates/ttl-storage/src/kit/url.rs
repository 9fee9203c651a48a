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
    let mut once = Once::new(repeatable, &[]);
    url.query_pairs()
        .map(|(name, value)| {
            once.check(&name)?;
            Ok((name.into_owned(), value.into_owned()))
        })
        .collect()
}

/// The check that a parameter is given at most once, for drivers that read
/// the query themselves: names in `repeatable` may repeat, and an alias
/// (`("timeout_ms", "timeout")`) counts as the name it stands for.
///
/// ```
/// use ttl_storage::kit::{UrlError, url::Once};
///
/// let mut once = Once::new(&[], &[("timeout_ms", "timeout")]);
/// once.check("timeout_ms").unwrap();
/// assert_eq!(once.check("timeout"), Err(UrlError::DuplicateParameter("timeout".into())));
/// ```
#[derive(Debug)]
pub struct Once<'a> {
    seen: std::collections::HashSet<String>,
    repeatable: &'a [&'a str],
    aliases: &'a [(&'a str, &'a str)],
}

impl<'a> Once<'a> {
    /// Nothing seen yet.
    pub fn new(repeatable: &'a [&'a str], aliases: &'a [(&'a str, &'a str)]) -> Self {
        Once {
            seen: std::collections::HashSet::new(),
            repeatable,
            aliases,
        }
    }

    /// [`UrlError::DuplicateParameter`] if `name` (or a name it is an
    /// alias of, or an alias of it) was seen before and may not repeat.
    pub fn check(&mut self, name: &str) -> Result<(), UrlError> {
        if self.repeatable.contains(&name) {
            return Ok(());
        }
        let canonical = self
            .aliases
            .iter()
            .find(|(alias, _)| *alias == name)
            .map_or(name, |(_, canonical)| *canonical);
        if self.seen.insert(canonical.to_owned()) {
            Ok(())
        } else {
            Err(UrlError::DuplicateParameter(name.to_owned()))
        }
    }
}
