//! Parsing `scylla://` / `cassandra://` URLs into a [`CassandraConfig`].
//!
//! The `url` crate parses everything but the host list: a WHATWG URL has one
//! host, and `h1:9042,h2:9042` would be read as host `h1` with the port
//! `9042,h2:9042`. So the host list is cut out of the authority first (the
//! text between `://` and the first `/`, `?` or `#`, after its last `@`),
//! each host is parsed on its own by `url`, and the rest of the URL (user,
//! password, keyspace, parameters) is parsed by `url` with one placeholder
//! host in the list's place.

use std::time::Duration;

use percent_encoding::percent_decode_str;
use ttl_storage::kit::{
    UrlError,
    query::{bool_param, duration_param, millis_param},
    url::Once,
};
use url::Url;

use crate::{ConfigError, config::CassandraConfig};

/// Stands in for the host list while `url` parses the rest (never used as
/// a host: `.invalid` is reserved, RFC 2606).
const PLACEHOLDER_HOST: &str = "contact-points.invalid";

impl CassandraConfig {
    /// Parses a URL:
    ///
    /// ```text
    /// scylla://[user:password@]host1[:port][,host2[:port]...]/keyspace[?param=value&...]
    /// ```
    ///
    /// `cassandra://` is accepted too. Hosts are names, IPv4 addresses or
    /// `[IPv6]` addresses, port 9042 when none is given; empty entries of
    /// the list are skipped. User, password, keyspace and parameters may be
    /// percent-encoded (`+` is left alone: this is not a form). Parameters
    /// (unknown ones are errors):
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `table` | table name | `ttl_records` |
    /// | `replication` | `simple:<rf>` or `<dc>:<rf>,<dc>:<rf>` (for `create_schema`) | none |
    /// | `consistency` | commit consistency of writes (`QUORUM`, `LOCAL_QUORUM`, ...) | `QUORUM` |
    /// | `serial_consistency` | `SERIAL` or `LOCAL_SERIAL` | `SERIAL` |
    /// | `tls` | `true` or `false` | `false` |
    /// | `tls_ca_file` | PEM CA file the nodes' certificates are checked against | none |
    /// | `timeout` | client-side request timeout (`500ms`, `12s`, `1m 30s`, ...) | `12s` |
    /// | `connect_timeout` | connection timeout (a duration, like `timeout`) | `5s` |
    /// | `timeout_ms` | older form of `timeout`: a number of milliseconds | |
    /// | `connect_timeout_ms` | older form of `connect_timeout`: a number of milliseconds | |
    /// | `create_schema` | create keyspace and table when missing | `false` |
    ///
    /// A timeout and its `_ms` form are one parameter: giving both is an
    /// error, as is a zero timeout.
    ///
    /// ```
    /// use std::time::Duration;
    /// use storage_cassandra::{CassandraConfig, SerialConsistency};
    ///
    /// let config = CassandraConfig::from_url(
    ///     "scylla://app:s%40cret@10.0.0.1,10.0.0.2:9043/leases?serial_consistency=LOCAL_SERIAL&timeout=2s",
    /// )
    /// .unwrap();
    /// assert_eq!(config.contact_points(), ["10.0.0.1:9042", "10.0.0.2:9043"]);
    /// assert_eq!(config.keyspace(), "leases");
    /// assert_eq!(config.user(), Some("app"));
    /// assert_eq!(config.serial_consistency(), SerialConsistency::LocalSerial);
    /// assert_eq!(config.request_timeout(), Duration::from_secs(2));
    /// ```
    pub fn from_url(url: &str) -> Result<CassandraConfig, ConfigError> {
        let (hosts, rest) = split_hosts(url).ok_or_else(|| {
            UrlError::NotAUrl("expected scylla://host[,host...]/keyspace or cassandra://...".into())
        })?;
        let parsed = ttl_storage::kit::url::parse(&rest)?;
        match parsed.scheme() {
            "scylla" | "cassandra" => {}
            other => {
                return Err(UrlError::BadScheme {
                    scheme: other.to_owned(),
                    expected: "scylla:// or cassandra://",
                }
                .into());
            }
        }
        if parsed.fragment().is_some() {
            return Err(ConfigError::Url(UrlError::NotAUrl(
                "a fragment (#...) is not allowed".into(),
            )));
        }
        if hosts.split(',').all(str::is_empty) {
            return Err(ConfigError::NoContactPoints);
        }
        let mut builder = CassandraConfig::builder();
        for host in hosts.split(',').filter(|h| !h.is_empty()) {
            builder = builder.contact_point(contact_point(host)?);
        }
        let keyspace = parsed.path().strip_prefix('/').unwrap_or(parsed.path());
        if !keyspace.is_empty() {
            builder = builder.keyspace(decode(keyspace)?);
        }
        match (parsed.username(), parsed.password()) {
            ("", None) => {}
            (user, Some(password)) => {
                builder = builder.credentials(decode(user)?, decode_password(password)?);
            }
            // `user:@host`: `url` drops an empty password; it was given.
            (user, None) if userinfo(url).is_some_and(|info| info.ends_with(':')) => {
                builder = builder.credentials(decode(user)?, String::new());
            }
            (_, None) => return Err(ConfigError::BadCredentials),
        }
        // A timeout and its older `_ms` form are one parameter.
        let mut once = Once::new(
            &[],
            &[
                ("timeout_ms", "timeout"),
                ("connect_timeout_ms", "connect_timeout"),
            ],
        );
        let mut tls = false;
        let mut ca_file = None;
        let query = parsed.query().unwrap_or("");
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name)?;
            let value = decode(value)?;
            once.check(&name)?;
            builder = match name.as_str() {
                "table" => builder.table(value),
                "replication" => builder.replication(value.parse()?),
                "consistency" => builder.consistency(value.parse()?),
                "serial_consistency" => builder.serial_consistency(value.parse()?),
                "tls" => {
                    tls = bool_param("tls", &value)?;
                    builder
                }
                "tls_ca_file" => {
                    ca_file = Some(value);
                    builder
                }
                "timeout" => builder.request_timeout(positive_duration("timeout", &value)?),
                "connect_timeout" => {
                    builder.connect_timeout(positive_duration("connect_timeout", &value)?)
                }
                "timeout_ms" => builder.request_timeout(millis_param("timeout_ms", &value)?),
                "connect_timeout_ms" => {
                    builder.connect_timeout(millis_param("connect_timeout_ms", &value)?)
                }
                "create_schema" => builder.create_schema(bool_param("create_schema", &value)?),
                _ => return Err(UrlError::UnknownParameter(name).into()),
            };
        }
        builder = match (tls, ca_file) {
            (true, Some(ca)) => builder.tls_ca_file(ca),
            (true, None) => return Err(ConfigError::TlsCaRequired),
            (false, Some(_)) => return Err(ConfigError::TlsCaWithoutTls),
            (false, None) => builder,
        };
        builder.build()
    }
}

/// The authority of `url` (between `://` and the first `/` or `?`), `None`
/// without `://`. A `#` does not end it, as before `url` was used (and as
/// in `storage-url`'s redaction): a password may hold one.
fn authority(url: &str) -> Option<(usize, &str)> {
    let start = url.find("://")? + "://".len();
    let rest = &url[start..];
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    Some((start, &rest[..end]))
}

/// The user information of `url` (before the authority's last `@`).
fn userinfo(url: &str) -> Option<&str> {
    authority(url).and_then(|(_, authority)| authority.rsplit_once('@').map(|(info, _)| info))
}

/// Cuts the host list out of `url`: returns it, and `url` with
/// [`PLACEHOLDER_HOST`] in its place (and a `#` of the user information
/// escaped, which `url` would take for a fragment); `None` without `://`.
fn split_hosts(url: &str) -> Option<(&str, String)> {
    let (start, authority) = authority(url)?;
    let hosts_start = start + authority.rfind('@').map_or(0, |at| at + 1);
    let hosts_end = start + authority.len();
    let rest = format!(
        "{}{}{PLACEHOLDER_HOST}{}",
        &url[..start],
        url[start..hosts_start].replace('#', "%23"),
        &url[hosts_end..]
    );
    Some((&url[hosts_start..hosts_end], rest))
}

/// One entry of the host list (`host`, `host:port`, `[ipv6]:port`), parsed
/// by `url`; the port only when one was given (the builder adds the
/// default, and checks the name).
fn contact_point(host: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadContactPoint(host.to_string());
    // The list was cut at `/`, `?` and `@`: an entry holds no user and no
    // path; `url` checks the host and the port, and anything after a `#`
    // is refused.
    let parsed = Url::parse(&format!("scylla://{host}")).map_err(|_| bad())?;
    if parsed.fragment().is_some() || !parsed.path().is_empty() {
        return Err(bad());
    }
    let name = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(bad)?;
    match parsed.port() {
        Some(port) => Ok(format!("{name}:{port}")),
        // `url` reads `host:` as no port; it is a missing one.
        None if host.ends_with(':') => Err(bad()),
        None => Ok(name.to_string()),
    }
}

/// Percent-decodes a password: like [`decode`], but an error does not
/// show it.
fn decode_password(text: &str) -> Result<String, ConfigError> {
    decode(text).map_err(|_| ConfigError::BadPercentEncoding("the password".into()))
}

/// Percent-decodes `text`, refusing a `%` not followed by two hex digits
/// (`percent-encoding` would keep it as it is) and bytes that are not UTF-8.
fn decode(text: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadPercentEncoding(text.to_string());
    let well_formed = text.split('%').skip(1).all(|escape| {
        escape.len() >= 2 && escape.as_bytes()[..2].iter().all(u8::is_ascii_hexdigit)
    });
    if !well_formed {
        return Err(bad());
    }
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| bad())
}

/// A positive humantime duration (`750ms`, `2s`, `1m 30s`), with no upper
/// bound (the other drivers' `check_timeout` range is not applied here).
fn positive_duration(name: &'static str, value: &str) -> Result<Duration, UrlError> {
    match duration_param(name, value)? {
        duration if duration.is_zero() => Err(UrlError::BadDuration {
            name,
            value: value.to_owned(),
        }),
        duration => Ok(duration),
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Replication, SerialConsistency, WriteConsistency};

    #[test]
    fn full_url() {
        let config = CassandraConfig::from_url(
            "cassandra://u%3Ax:p%40ss@h1:9043,[::1]/ks?table=leases&replication=dc1:3,dc2:2\
             &consistency=LOCAL_QUORUM&serial_consistency=LOCAL_SERIAL&tls=true\
             &tls_ca_file=%2Fetc%2Fca.pem&timeout_ms=1500&connect_timeout_ms=700&create_schema=true",
        )
        .unwrap();
        assert_eq!(config.contact_points(), ["h1:9043", "[::1]:9042"]);
        assert_eq!(config.keyspace(), "ks");
        assert_eq!(config.table(), "leases");
        assert_eq!(
            config.replication(),
            Some(&Replication::NetworkTopology(vec![
                ("dc1".into(), 3),
                ("dc2".into(), 2)
            ]))
        );
        assert_eq!(config.consistency(), WriteConsistency::LocalQuorum);
        assert_eq!(config.serial_consistency(), SerialConsistency::LocalSerial);
        assert_eq!(config.user(), Some("u:x"));
        assert_eq!(config.credentials.as_ref().unwrap().password, "p@ss");
        assert_eq!(
            config.tls().unwrap().ca_file,
            std::path::PathBuf::from("/etc/ca.pem")
        );
        assert_eq!(config.request_timeout(), Duration::from_millis(1500));
        assert_eq!(config.connect_timeout(), Duration::from_millis(700));
        assert!(config.create_schema());
    }

    #[test]
    fn bad_urls_have_typed_errors() {
        let cases: &[(&str, ConfigError)] = &[
            (
                "http://h/ks",
                ConfigError::Url(UrlError::BadScheme {
                    scheme: "http".into(),
                    expected: "scylla:// or cassandra://",
                }),
            ),
            ("scylla:///ks", ConfigError::NoContactPoints),
            ("scylla://h", ConfigError::NoKeyspace),
            ("scylla://h/", ConfigError::NoKeyspace),
            ("scylla://u@h/ks", ConfigError::BadCredentials),
            (
                "scylla://h/ks?tabel=x",
                ConfigError::Url(UrlError::UnknownParameter("tabel".into())),
            ),
            (
                "scylla://h/ks?table=a&table=b",
                ConfigError::Url(UrlError::DuplicateParameter("table".into())),
            ),
            ("scylla://h/ks?tls=true", ConfigError::TlsCaRequired),
            ("scylla://h/ks?tls_ca_file=x", ConfigError::TlsCaWithoutTls),
            (
                "scylla://h/ks?create_schema=true",
                ConfigError::ReplicationRequired,
            ),
            (
                "scylla://h/k%zz",
                ConfigError::BadPercentEncoding("k%zz".into()),
            ),
            (
                "scylla://h/k%2",
                ConfigError::BadPercentEncoding("k%2".into()),
            ),
            (
                "scylla://h/ks?tls=yes",
                ConfigError::Url(UrlError::BadBool {
                    name: "tls",
                    value: "yes".into(),
                }),
            ),
            (
                "scylla://h/ks?timeout_ms=0",
                ConfigError::Url(UrlError::BadMillis {
                    name: "timeout_ms",
                    value: "0".into(),
                }),
            ),
            (
                "scylla://h/ks?serial_consistency=QUORUM",
                ConfigError::BadSerialConsistency("QUORUM".into()),
            ),
            (
                "scylla://h:70000/ks",
                ConfigError::BadContactPoint("h:70000".into()),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(
                CassandraConfig::from_url(url).as_ref(),
                Err(expected),
                "{url}"
            );
        }
    }

    #[test]
    fn minimal_url() {
        let config = CassandraConfig::from_url("scylla://localhost/ks").unwrap();
        assert_eq!(config.contact_points(), ["localhost:9042"]);
        assert_eq!(
            config,
            CassandraConfig::builder()
                .contact_point("localhost")
                .keyspace("ks")
                .build()
                .unwrap()
        );
    }

    #[test]
    fn host_lists() {
        let hosts = |url: &str| {
            CassandraConfig::from_url(url)
                .unwrap()
                .contact_points()
                .to_vec()
        };
        assert_eq!(
            hosts("scylla://a,b:9043,10.0.0.3,[::1]:9044,[fe80::2]/ks"),
            [
                "a:9042",
                "b:9043",
                "10.0.0.3:9042",
                "[::1]:9044",
                "[fe80::2]:9042"
            ]
        );
        // Empty entries are skipped, as before.
        assert_eq!(hosts("scylla://,a,,b,/ks"), ["a:9042", "b:9042"]);
        // Credentials before a list; an `@` in the password, unencoded.
        let config = CassandraConfig::from_url("scylla://u:p@ss@a:1,b:2/ks").unwrap();
        assert_eq!(config.contact_points(), ["a:1", "b:2"]);
        assert_eq!(config.user(), Some("u"));
        assert_eq!(config.credentials.as_ref().unwrap().password, "p@ss");
        // A list ended by the query: the keyspace is still required.
        assert_eq!(
            CassandraConfig::from_url("scylla://a,b?table=t").map(|c| c.contact_points().to_vec()),
            Err(ConfigError::NoKeyspace)
        );
        for bad in ["a,b:0", "a,b:x", "a,b:70000", "a,[::1", "a,[zz]", "a,b c"] {
            let err = CassandraConfig::from_url(&format!("scylla://{bad}/ks")).unwrap_err();
            assert!(
                matches!(err, ConfigError::BadContactPoint(_)),
                "{bad}: {err:?}"
            );
        }
        assert_eq!(
            CassandraConfig::from_url("scylla://,,/ks"),
            Err(ConfigError::NoContactPoints)
        );
        assert_eq!(
            CassandraConfig::from_url("scylla://u:p@/ks"),
            Err(ConfigError::NoContactPoints)
        );
    }

    #[test]
    fn durations_and_their_ms_aliases() {
        let config =
            CassandraConfig::from_url("scylla://h/ks?timeout=1s%20500ms&connect_timeout=2s")
                .unwrap();
        assert_eq!(config.request_timeout(), Duration::from_millis(1500));
        assert_eq!(config.connect_timeout(), Duration::from_secs(2));
        let config =
            CassandraConfig::from_url("scylla://h/ks?timeout_ms=250&connect_timeout_ms=3000")
                .unwrap();
        assert_eq!(config.request_timeout(), Duration::from_millis(250));
        assert_eq!(config.connect_timeout(), Duration::from_secs(3));
        let bad = |name: &'static str, value: &str| {
            ConfigError::Url(if name.ends_with("_ms") {
                UrlError::BadMillis {
                    name,
                    value: value.into(),
                }
            } else {
                UrlError::BadDuration {
                    name,
                    value: value.into(),
                }
            })
        };
        let cases: &[(&str, ConfigError)] = &[
            ("timeout=5", bad("timeout", "5")),
            ("timeout=0s", bad("timeout", "0s")),
            ("timeout=soon", bad("timeout", "soon")),
            ("connect_timeout=-1s", bad("connect_timeout", "-1s")),
            ("timeout_ms=2s", bad("timeout_ms", "2s")),
            ("connect_timeout_ms=-5", bad("connect_timeout_ms", "-5")),
            (
                "timeout=1s&timeout_ms=1000",
                ConfigError::Url(UrlError::DuplicateParameter("timeout_ms".into())),
            ),
            (
                "connect_timeout_ms=1&connect_timeout=1s",
                ConfigError::Url(UrlError::DuplicateParameter("connect_timeout".into())),
            ),
        ];
        for (query, expected) in cases {
            let url = format!("scylla://h/ks?{query}");
            assert_eq!(
                CassandraConfig::from_url(&url).as_ref(),
                Err(expected),
                "{url}"
            );
        }
        let err = CassandraConfig::from_url("scylla://h/ks?timeout=5").unwrap_err();
        // The message shows a duration to write instead.
        assert!(err.to_string().contains("5s"), "{err}");
    }

    #[test]
    fn encodings_and_edges() {
        // `+` stays a plus (not a form); `%2B` is one too.
        let config =
            CassandraConfig::from_url("scylla://u:a+b%2Bc@h/ks?tls=true&tls_ca_file=/etc/ca+1.pem")
                .unwrap();
        assert_eq!(config.credentials.as_ref().unwrap().password, "a+b+c");
        assert_eq!(
            config.tls().unwrap().ca_file,
            std::path::PathBuf::from("/etc/ca+1.pem")
        );
        // A `#` in a password needs no escape (as before); after the
        // path it starts a fragment, which is refused.
        let config = CassandraConfig::from_url("scylla://u:p#w@h/ks").unwrap();
        assert_eq!(config.credentials.as_ref().unwrap().password, "p#w");
        assert_eq!(
            CassandraConfig::from_url("scylla://h#x/ks"),
            Err(ConfigError::BadContactPoint("h#x".into()))
        );
        // Only the timeouts have `_ms` forms.
        assert_eq!(
            CassandraConfig::from_url("scylla://h/ks?table=a&table_ms=b"),
            Err(ConfigError::Url(UrlError::UnknownParameter(
                "table_ms".into()
            )))
        );
        // An empty password is a password.
        let config = CassandraConfig::from_url("scylla://u:@h/ks").unwrap();
        assert_eq!(config.user(), Some("u"));
        assert_eq!(config.credentials.as_ref().unwrap().password, "");
        assert_eq!(
            CassandraConfig::from_url("scylla://:pw@h/ks"),
            Err(ConfigError::BadCredentials)
        );
        assert_eq!(
            CassandraConfig::from_url("scylla://u:%FF@h/ks"),
            Err(ConfigError::BadPercentEncoding("the password".into()))
        );
        assert_eq!(
            CassandraConfig::from_url("scylla://h/ks?table=%zz"),
            Err(ConfigError::BadPercentEncoding("%zz".into()))
        );
        assert!(matches!(
            CassandraConfig::from_url("scylla://h/ks#frag"),
            Err(ConfigError::Url(UrlError::NotAUrl(_)))
        ));
        assert!(matches!(
            CassandraConfig::from_url("scylla:h/ks"),
            Err(ConfigError::Url(UrlError::NotAUrl(_)))
        ));
        assert_eq!(
            CassandraConfig::from_url("cassandra://h/a%5Fb").map(|c| c.keyspace().to_string()),
            Ok("a_b".to_string())
        );
        assert!(matches!(
            CassandraConfig::from_url("scylla://h/ks/more"),
            Err(ConfigError::BadIdentifier { .. })
        ));
    }

    #[test]
    fn errors_never_show_the_password() {
        for url in [
            "scylla://u:hunter2@h/ks?bogus=1",
            "scylla://u:hunter2@h:99999/ks",
            "scylla://u:hunter2@h/ks?timeout=x",
            "scylla://u:hunter2%zz@h/ks",
        ] {
            let err = CassandraConfig::from_url(url).unwrap_err();
            assert!(!err.to_string().contains("hunter2"), "{err}");
        }
    }
}
