//! Parsing `postgres://` URLs into a [`PostgresConfig`].

use ttl_storage::kit::{
    UrlError,
    options::Param,
    query::bool_param,
    url::{decode, params, parse},
};

use crate::{config::PostgresConfig, error::ConfigError};

/// The schemes, as an error message names them.
const SCHEMES: &str = "postgres:// or postgresql://";

/// The shared connection options PostgreSQL's URLs take (its CA file is
/// libpq's `sslrootcert`; it has no key prefix).
const TIMEOUTS: &[Param] = &[Param::Timeout, Param::ConnectTimeout];

impl PostgresConfig {
    /// Parses a URL:
    ///
    /// ```text
    /// postgres://[user[:password]@]host[:port][,host[:port]...][/dbname][?param=value&...]
    /// ```
    ///
    /// `postgresql://` is accepted too. User, password and database may be
    /// percent-encoded. Several servers (libpq's multi-host form: a primary
    /// and its standbys) are tried in order, and the driver connects to the
    /// first that accepts writes (`target_session_attrs=read-write`, always
    /// on): after a failover it finds the promoted standby. Parameters
    /// (unknown ones are errors):
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `sslmode` | `disable`, `require`, `verify-ca`, `verify-full` (`prefer` / `allow` are refused: they fall back to plaintext) | `disable` |
    /// | `sslrootcert` | PEM CA file to trust instead of the system's roots | none |
    /// | `table` | table name | `ttl_records` |
    /// | `schema` | schema of the table | the search path |
    /// | `create_table` | create the table when missing | `true` |
    /// | `pool_size` | pooled connections | `8` |
    /// | `timeout` | timeout of one statement (`500ms`, `5s`, ...) | `5s` |
    /// | `connect_timeout` | timeout for opening a connection | `5s` |
    /// | `target_session_attrs` | only `read-write` (what the driver always asks for) | `read-write` |
    ///
    /// ```
    /// use storage_postgres::{PostgresConfig, SslMode};
    ///
    /// let config = PostgresConfig::from_url(
    ///     "postgres://app:s%40cret@db.internal/leases?sslmode=verify-full&table=leader_leases",
    /// )
    /// .unwrap();
    /// assert_eq!(config.user(), "app");
    /// assert_eq!(config.dbname(), "leases");
    /// assert_eq!(config.ssl_mode(), SslMode::VerifyFull);
    /// assert_eq!(config.table(), "leader_leases");
    /// assert_eq!(config.redacted_url(), "postgres://app:***@db.internal:5432/leases");
    ///
    /// let ha = PostgresConfig::from_url(
    ///     "postgres://app@pg-a:5432,pg-b:5433/leases?target_session_attrs=read-write",
    /// )
    /// .unwrap();
    /// assert_eq!(ha.hosts(), [("pg-a", 5432), ("pg-b", 5433)]);
    /// ```
    pub fn from_url(url: &str) -> Result<PostgresConfig, ConfigError> {
        let (url, other_hosts) = split_hosts(url)?;
        let parsed = parse(&url)?;
        match parsed.scheme() {
            "postgres" | "postgresql" => {}
            other => {
                return Err(ConfigError::Url(UrlError::BadScheme {
                    scheme: other.to_string(),
                    expected: SCHEMES,
                }));
            }
        }
        let host = match parsed.host() {
            Some(url::Host::Ipv6(addr)) => addr.to_string(),
            Some(host) => host.to_string(),
            None => return Err(ConfigError::NoHost),
        };
        let mut builder = PostgresConfig::builder().host(host);
        for (host, port) in other_hosts {
            builder = builder.other_host(host, port);
        }
        if let Some(port) = parsed.port() {
            builder = builder.port(port);
        }
        if !parsed.username().is_empty() {
            builder = builder.user(decode(parsed.username(), "user name")?);
        }
        if let Some(password) = parsed.password() {
            builder = builder.password(decode(password, "password")?);
        }
        let dbname = parsed.path().trim_start_matches('/');
        if !dbname.is_empty() {
            builder = builder.dbname(decode(dbname, "database name")?);
        }
        for (name, value) in params(&parsed, &[])? {
            if builder.options.apply(TIMEOUTS, &name, &value)? {
                continue;
            }
            builder = match name.as_str() {
                "sslmode" => builder.ssl_mode(value.parse()?),
                "sslrootcert" => builder.ssl_root_cert(value),
                "table" => builder.table(value),
                "schema" => builder.schema(value),
                "create_table" => builder.create_table(bool_param("create_table", &value)?),
                "pool_size" => builder.pool_size(
                    value
                        .parse()
                        .map_err(|_| ConfigError::BadPoolSize(value.to_string()))?,
                ),
                "target_session_attrs" => match value.as_ref() {
                    "read-write" => builder,
                    other => return Err(ConfigError::BadTargetSessionAttrs(other.to_string())),
                },
                _ => return Err(ConfigError::Url(UrlError::UnknownParameter(name))),
            };
        }
        builder.build()
    }
}

/// The URL with only the first server of a comma-separated host list, and
/// the others as `(host, port)`.
fn split_hosts(url: &str) -> Result<(String, Vec<(String, u16)>), ConfigError> {
    let Some((scheme, rest)) = url.split_once("://") else {
        return Ok((url.to_string(), Vec::new()));
    };
    let end = rest.find(['/', '?', '#']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = match authority.rfind('@') {
        Some(at) => authority.split_at(at + 1),
        None => ("", authority),
    };
    let mut list = hosts.split(',');
    let first = list.next().unwrap_or_default();
    let mut others = Vec::new();
    for server in list {
        others.push(parse_server(server)?);
    }
    Ok((format!("{scheme}://{userinfo}{first}{tail}"), others))
}

/// `host`, `host:port`, `[v6]` or `[v6]:port`.
fn parse_server(server: &str) -> Result<(String, u16), ConfigError> {
    let bad = || ConfigError::BadHost(server.to_string());
    let (host, port) = match server.strip_prefix('[') {
        Some(v6) => {
            let (host, after) = v6.split_once(']').ok_or_else(bad)?;
            match after {
                "" => (host, None),
                _ => (host, Some(after.strip_prefix(':').ok_or_else(bad)?)),
            }
        }
        None => match server.split_once(':') {
            Some((host, port)) => (host, Some(port)),
            None => (server, None),
        },
    };
    if host.is_empty() || host.contains(['@', ':', '/']) && !server.starts_with('[') {
        return Err(bad());
    }
    let port = match port {
        Some(port) => port.parse::<u16>().map_err(|_| bad())?,
        None => crate::DEFAULT_PORT,
    };
    Ok((host.to_string(), port))
}

#[cfg(test)]
mod tests {
    use std::{path::Path, time::Duration};

    use super::*;
    use crate::SslMode;

    #[test]
    fn minimal_url() {
        let config = PostgresConfig::from_url("postgres://localhost").unwrap();
        assert_eq!(
            config,
            PostgresConfig::builder().host("localhost").build().unwrap()
        );
        assert_eq!(
            config.redacted_url(),
            "postgres://postgres@localhost:5432/postgres"
        );
    }

    #[test]
    fn full_url() {
        let config = PostgresConfig::from_url(
            "postgresql://u%40x:p%3Aw%2F@[::1]:6432/my%20db?sslmode=require\
             &sslrootcert=%2Fetc%2Fca.pem&table=leases&schema=elect&create_table=false\
             &pool_size=3&timeout=1s%20500ms&connect_timeout=2s",
        )
        .unwrap();
        assert_eq!(config.host(), "::1");
        assert_eq!(config.port(), 6432);
        assert_eq!(config.user(), "u@x");
        assert_eq!(config.password.as_deref(), Some("p:w/"));
        assert_eq!(config.dbname(), "my db");
        assert_eq!(config.ssl_mode(), SslMode::Require);
        assert_eq!(config.ssl_root_cert(), Some(Path::new("/etc/ca.pem")));
        assert_eq!(config.qualified_table(), "elect.leases");
        assert!(!config.create_table());
        assert_eq!(config.pool_size(), 3);
        assert_eq!(config.request_timeout(), Duration::from_millis(1500));
        assert_eq!(config.connect_timeout(), Duration::from_secs(2));
        assert_eq!(config.redacted_url(), "postgres://u@x:***@[::1]:6432/my db");
    }

    #[test]
    fn bad_urls_have_typed_errors() {
        let cases: &[(&str, ConfigError)] = &[
            (
                "mysql://h",
                ConfigError::Url(UrlError::BadScheme {
                    scheme: "mysql".into(),
                    expected: SCHEMES,
                }),
            ),
            (
                "postgres://h?sslmode=prefer",
                ConfigError::FallbackSslMode("prefer".into()),
            ),
            (
                "postgres://h?sslmode=allow",
                ConfigError::FallbackSslMode("allow".into()),
            ),
            (
                "postgres://h?sslmode=on",
                ConfigError::BadSslMode("on".into()),
            ),
            (
                "postgres://h?sslrootcert=/ca.pem",
                ConfigError::RootCertWithoutTls,
            ),
            (
                "postgres://h?tabel=x",
                ConfigError::Url(UrlError::UnknownParameter("tabel".into())),
            ),
            (
                "postgres://h?table=a&table=b",
                ConfigError::Url(UrlError::DuplicateParameter("table".into())),
            ),
            (
                "postgres://h?pool_size=x",
                ConfigError::BadPoolSize("x".into()),
            ),
            (
                "postgres://h?create_table=yes",
                ConfigError::Url(UrlError::BadBool {
                    name: "create_table",
                    value: "yes".into(),
                }),
            ),
            (
                "postgres://h?timeout=5",
                ConfigError::Url(UrlError::BadDuration {
                    name: "timeout",
                    value: "5".into(),
                }),
            ),
            (
                "postgres://u:%FF@h",
                ConfigError::Url(UrlError::BadPercentEncoding("password")),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(
                PostgresConfig::from_url(url).as_ref(),
                Err(expected),
                "{url}"
            );
        }
    }

    #[test]
    fn several_servers_in_libpq_form() {
        let config = PostgresConfig::from_url(
            "postgresql://u:pw@10.0.0.1:5432,10.0.0.2,[::1]:6432/db?target_session_attrs=read-write&timeout=2s",
        )
        .unwrap();
        assert_eq!(
            config.hosts(),
            [("10.0.0.1", 5432), ("10.0.0.2", 5432), ("::1", 6432)]
        );
        assert_eq!(config.password.as_deref(), Some("pw"));
        assert_eq!(config.dbname(), "db");
        assert_eq!(config.request_timeout(), Duration::from_secs(2));
        assert_eq!(
            config.redacted_url(),
            "postgres://u:***@10.0.0.1:5432,10.0.0.2:5432,[::1]:6432/db"
        );
        for (url, expected) in [
            ("postgres://h1,h2:x/db", ConfigError::BadHost("h2:x".into())),
            ("postgres://h1,/db", ConfigError::BadHost(String::new())),
            (
                "postgres://h?target_session_attrs=any",
                ConfigError::BadTargetSessionAttrs("any".into()),
            ),
        ] {
            assert_eq!(PostgresConfig::from_url(url), Err(expected), "{url}");
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = PostgresConfig::from_url("postgres://u:hunter2@h?bogus=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let config = PostgresConfig::from_url("postgres://u:hunter2@h").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
