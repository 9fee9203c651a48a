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
