//! Parsing `redis://` / `rediss://` URLs into a [`ValkeyConfig`].

use ttl_storage::kit::{
    UrlError,
    options::Param,
    query::duration_param,
    url::{decode, params, parse},
};

use crate::{config::ValkeyConfig, error::ConfigError};

/// The schemes, as an error message names them.
const SCHEMES: &str =
    "redis://, rediss://, valkey://, valkeys:// or redis-sentinel:// (rediss-sentinel://)";

impl ValkeyConfig {
    /// Parses a URL:
    ///
    /// ```text
    /// redis://[[user]:password@]host[:port][/database][?param=value&...]
    /// rediss://...        TLS (rustls); never falls back to plaintext
    /// ```
    ///
    /// `valkey://` and `valkeys://` are accepted too. User and password may
    /// be percent-encoded.
    ///
    /// With Sentinel (a primary, its replicas, and Sentinels that fail
    /// over), the URL names the Sentinels and the monitored service; the
    /// driver asks them for the primary and, after a failover, reconnects
    /// to the promoted replica:
    ///
    /// ```text
    /// redis-sentinel://[[user]:password@]host[:port][,host[:port]...]/service[/database][?...]
    /// rediss-sentinel://...   TLS to the Sentinels and the servers
    /// ```
    ///
    /// (`valkey-sentinel://`, `valkeys-sentinel://` too; Sentinel's port
    /// defaults to 26379; the credentials are the servers', Sentinels
    /// without `requirepass`.) Parameters (unknown ones are errors):
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `wait_replicas` | after each applied write, `WAIT` for this many replicas; a write they do not confirm is outcome unknown | off |
    /// | `wait_timeout` | `WAIT`'s timeout (below `timeout`) | `1s` |
    /// | `prefix` | prefix of every key | `ttl:` |
    /// | `timeout` | timeout of one command (`500ms`, `5s`, ...) | `5s` |
    /// | `connect_timeout` | timeout for opening a connection | `5s` |
    /// | `tls_ca_file` | PEM CA file to trust instead of the system's roots (TLS only) | none |
    ///
    /// ```
    /// use std::time::Duration;
    /// use storage_valkey::ValkeyConfig;
    ///
    /// let config = ValkeyConfig::from_url(
    ///     "rediss://app:s%40cret@cache.internal:6380/2?prefix=leases:&timeout=750ms",
    /// )
    /// .unwrap();
    /// assert_eq!(config.host(), "cache.internal");
    /// assert_eq!(config.port(), 6380);
    /// assert_eq!(config.database(), Some(2));
    /// assert_eq!(config.user(), Some("app"));
    /// assert!(config.tls().is_some());
    /// assert_eq!(config.prefix(), "leases:");
    /// assert_eq!(config.request_timeout(), Duration::from_millis(750));
    /// assert_eq!(config.redacted_url(), "rediss://app:***@cache.internal:6380/2");
    ///
    /// let ha = ValkeyConfig::from_url(
    ///     "redis-sentinel://:pw@10.0.0.1,10.0.0.2:26380/leases?wait_replicas=1&wait_timeout=500ms",
    /// )
    /// .unwrap();
    /// let sentinel = ha.sentinel().unwrap();
    /// assert_eq!(sentinel.service, "leases");
    /// assert_eq!(sentinel.sentinels[1], ("10.0.0.2".to_string(), 26380));
    /// assert_eq!(ha.wait_replicas().unwrap().replicas, 1);
    /// ```
    pub fn from_url(url: &str) -> Result<ValkeyConfig, ConfigError> {
        let (url, other_hosts) = split_hosts(url)?;
        let parsed = parse(&url)?;
        let (tls, sentinel) = match parsed.scheme() {
            "redis" | "valkey" => (false, false),
            "rediss" | "valkeys" => (true, false),
            "redis-sentinel" | "valkey-sentinel" => (false, true),
            "rediss-sentinel" | "valkeys-sentinel" => (true, true),
            other => {
                return Err(ConfigError::Url(UrlError::BadScheme {
                    scheme: other.to_string(),
                    expected: SCHEMES,
                }));
            }
        };
        if !other_hosts.is_empty() && !sentinel {
            return Err(ConfigError::Url(UrlError::NotAUrl(
                "several hosts need redis-sentinel:// (or a single server)".into(),
            )));
        }
        let host = match parsed.host() {
            Some(url::Host::Ipv6(addr)) => addr.to_string(),
            Some(host) => host.to_string(),
            None => return Err(ConfigError::NoHost),
        };
        let mut builder = ValkeyConfig::builder().tls(tls);
        let mut path = parsed.path().trim_start_matches('/');
        if sentinel {
            let mut sentinels = vec![(host, parsed.port().unwrap_or(crate::DEFAULT_SENTINEL_PORT))];
            sentinels.extend(other_hosts);
            let (service, db) = path.split_once('/').unwrap_or((path, ""));
            builder = builder.sentinel(sentinels, decode(service, "service name")?);
            path = db;
        } else {
            builder = builder.host(host);
            if let Some(port) = parsed.port() {
                builder = builder.port(port);
            }
        }
        let mut wait: Option<crate::WaitReplicas> = None;
        match path {
            "" => {}
            db => {
                let db = db
                    .parse::<u8>()
                    .map_err(|_| ConfigError::BadDatabase(db.to_string()))?;
                builder = builder.database(db);
            }
        }
        if !parsed.username().is_empty() {
            builder = builder.user(decode(parsed.username(), "user name")?);
        }
        if let Some(password) = parsed.password() {
            builder = builder.password(decode(password, "password")?);
        }
        for (name, value) in params(&parsed, &[])? {
            if builder.options.apply(Param::ALL, &name, &value)? {
                continue;
            }
            builder = match name.as_str() {
                "wait_replicas" => {
                    let replicas = value.parse().map_err(|_| ConfigError::BadWaitReplicas)?;
                    let timeout = wait.map_or(crate::DEFAULT_WAIT_TIMEOUT, |w| w.timeout);
                    wait = Some(crate::WaitReplicas { replicas, timeout });
                    builder
                }
                "wait_timeout" => {
                    let timeout = duration_param("wait_timeout", &value)?;
                    let replicas = wait.map_or(0, |w| w.replicas);
                    wait = Some(crate::WaitReplicas { replicas, timeout });
                    builder
                }
                _ => return Err(ConfigError::Url(UrlError::UnknownParameter(name))),
            };
        }
        if let Some(wait) = wait {
            builder = builder.wait_replicas(wait);
        }
        builder.build()
    }
}

/// The URL with only the first host of a comma-separated list, and the
/// others as `(host, port)` (Sentinel's port by default).
fn split_hosts(url: &str) -> Result<(String, Vec<(String, u16)>), ConfigError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((url.to_string(), Vec::new()));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = authority.split_at(authority.rfind('@').map_or(0, |at| at + 1));
    let mut list = hosts.split(',');
    let first = list.next().unwrap_or_default();
    let mut others = Vec::new();
    for host in list {
        let (name, port) = match host.rsplit_once(':') {
            Some((name, port)) if !name.ends_with(']') || host.starts_with('[') => {
                (name, port.parse().map_err(|_| ConfigError::BadSentinel)?)
            }
            _ => (host, crate::DEFAULT_SENTINEL_PORT),
        };
        let name = name.trim_start_matches('[').trim_end_matches(']');
        if name.is_empty() {
            return Err(ConfigError::BadSentinel);
        }
        others.push((name.to_string(), port));
    }
    Ok((format!("{scheme}://{userinfo}{first}{tail}"), others))
}

#[cfg(test)]
mod tests {
    use std::{path::PathBuf, time::Duration};

    use super::*;

    #[test]
    fn minimal_url() {
        let config = ValkeyConfig::from_url("redis://localhost").unwrap();
        assert_eq!(
            config,
            ValkeyConfig::builder().host("localhost").build().unwrap()
        );
        assert_eq!(config.redacted_url(), "redis://localhost:6379");
    }

    #[test]
    fn full_url() {
        let config = ValkeyConfig::from_url(
            "valkeys://u%3Ax:p%40ss%2Fw@[::1]:7000/15?prefix=a%2Fb:&timeout=1s%20500ms\
             &connect_timeout=2s&tls_ca_file=%2Fetc%2Fca.pem",
        )
        .unwrap();
        assert_eq!(config.host(), "::1");
        assert_eq!(config.port(), 7000);
        assert_eq!(config.database(), Some(15));
        assert_eq!(config.user(), Some("u:x"));
        assert_eq!(
            config.credentials.as_ref().map(|c| c.password.as_str()),
            Some("p@ss/w")
        );
        assert_eq!(
            config.tls().and_then(|t| t.ca_file.clone()),
            Some(PathBuf::from("/etc/ca.pem"))
        );
        assert_eq!(config.prefix(), "a/b:");
        assert_eq!(config.request_timeout(), Duration::from_millis(1500));
        assert_eq!(config.connect_timeout(), Duration::from_secs(2));
        assert_eq!(config.redacted_url(), "rediss://u:x:***@[::1]:7000/15");
    }

    #[test]
    fn password_without_user() {
        let config = ValkeyConfig::from_url("redis://:secret@h:1").unwrap();
        assert!(config.has_password());
        assert_eq!(config.user(), None);
        assert_eq!(config.redacted_url(), "redis://:***@h:1");
    }

    #[test]
    fn bad_urls_have_typed_errors() {
        let cases: &[(&str, ConfigError)] = &[
            (
                "http://h",
                ConfigError::Url(UrlError::BadScheme {
                    scheme: "http".into(),
                    expected: SCHEMES,
                }),
            ),
            ("redis://h/x", ConfigError::BadDatabase("x".into())),
            ("redis://h/256", ConfigError::BadDatabase("256".into())),
            ("redis://u@h", ConfigError::UserWithoutPassword),
            (
                "redis://h?prefx=a",
                ConfigError::Url(UrlError::UnknownParameter("prefx".into())),
            ),
            (
                "redis://h?prefix=a&prefix=b",
                ConfigError::Url(UrlError::DuplicateParameter("prefix".into())),
            ),
            (
                "redis://h?tls_ca_file=/ca.pem",
                ConfigError::CaFileWithoutTls,
            ),
            (
                "redis://h?timeout=5",
                ConfigError::Url(UrlError::BadDuration {
                    name: "timeout",
                    value: "5".into(),
                }),
            ),
            (
                "redis://h?connect_timeout=2h",
                ConfigError::Url(UrlError::BadDuration {
                    name: "connect_timeout",
                    value: "2h".into(),
                }),
            ),
            (
                "redis://:%FF@h",
                ConfigError::Url(UrlError::BadPercentEncoding("password")),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(ValkeyConfig::from_url(url).as_ref(), Err(expected), "{url}");
        }
        assert!(matches!(
            ValkeyConfig::from_url("not a url"),
            Err(ConfigError::Url(UrlError::NotAUrl(_)))
        ));
        assert_eq!(
            ValkeyConfig::from_url("redis://").err(),
            Some(ConfigError::NoHost)
        );
    }

    #[test]
    fn sentinel_urls() {
        let config = ValkeyConfig::from_url(
            "valkey-sentinel://:pw@127.0.0.1:26001,127.0.0.1:26002,h3/mymaster/2?wait_replicas=1",
        )
        .unwrap();
        let sentinel = config.sentinel().unwrap();
        assert_eq!(
            sentinel.sentinels,
            [
                ("127.0.0.1".to_string(), 26001),
                ("127.0.0.1".to_string(), 26002),
                ("h3".to_string(), 26379)
            ]
        );
        assert_eq!(sentinel.service, "mymaster");
        assert_eq!(config.database(), Some(2));
        assert_eq!(
            config.wait_replicas(),
            Some(crate::WaitReplicas {
                replicas: 1,
                timeout: Duration::from_secs(1)
            })
        );
        assert_eq!(
            config.redacted_url(),
            "redis-sentinel://:***@127.0.0.1:26001,127.0.0.1:26002,h3:26379/mymaster/2"
        );
        let cases: &[(&str, ConfigError)] = &[
            ("redis-sentinel://h", ConfigError::BadSentinel),
            ("redis-sentinel://h,x:y/s", ConfigError::BadSentinel),
            ("redis://h?wait_replicas=0", ConfigError::BadWaitReplicas),
            ("redis://h?wait_replicas=x", ConfigError::BadWaitReplicas),
            (
                "redis://h?wait_replicas=1&wait_timeout=5s",
                ConfigError::BadWaitReplicas,
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(ValkeyConfig::from_url(url).as_ref(), Err(expected), "{url}");
        }
        assert!(matches!(
            ValkeyConfig::from_url("redis://a,b"),
            Err(ConfigError::Url(UrlError::NotAUrl(_)))
        ));
        let plain = ValkeyConfig::from_url("redis://h?wait_timeout=200ms&wait_replicas=2").unwrap();
        assert_eq!(
            plain.wait_replicas().unwrap().timeout,
            Duration::from_millis(200)
        );
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = ValkeyConfig::from_url("redis://u:hunter2@h?bogus=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let err = ValkeyConfig::from_url("redis://u:hunter2@h:99999").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
    }
}
