//! Parsing `scylla://` URLs into a [`ScyllaConfig`].

use std::{collections::HashSet, time::Duration};

use crate::{ConfigError, config::ScyllaConfig};

impl ScyllaConfig {
    /// Parses a URL:
    ///
    /// ```text
    /// scylla://[user:password@]host1[:port][,host2[:port]...]/keyspace[?param=value&...]
    /// ```
    ///
    /// `cassandra://` is accepted too. User, password and parameter values
    /// may be percent-encoded. Parameters (unknown ones are errors):
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `table` | table name | `ttl_records` |
    /// | `replication` | `simple:<rf>` or `<dc>:<rf>,<dc>:<rf>` (for `create_schema`) | none |
    /// | `consistency` | commit consistency of writes (`QUORUM`, `LOCAL_QUORUM`, ...) | `QUORUM` |
    /// | `serial_consistency` | `SERIAL` or `LOCAL_SERIAL` | `SERIAL` |
    /// | `tls` | `true` or `false` | `false` |
    /// | `tls_ca_file` | PEM CA file the nodes' certificates are checked against | none |
    /// | `timeout_ms` | client-side request timeout | 12000 |
    /// | `connect_timeout_ms` | connection timeout | 5000 |
    /// | `create_schema` | create keyspace and table when missing | `false` |
    ///
    /// ```
    /// use storage_scylla::{ScyllaConfig, SerialConsistency};
    ///
    /// let config = ScyllaConfig::from_url(
    ///     "scylla://app:s%40cret@10.0.0.1,10.0.0.2:9043/leases?serial_consistency=LOCAL_SERIAL",
    /// )
    /// .unwrap();
    /// assert_eq!(config.contact_points(), ["10.0.0.1:9042", "10.0.0.2:9043"]);
    /// assert_eq!(config.keyspace(), "leases");
    /// assert_eq!(config.user(), Some("app"));
    /// assert_eq!(config.serial_consistency(), SerialConsistency::LocalSerial);
    /// ```
    pub fn from_url(url: &str) -> Result<ScyllaConfig, ConfigError> {
        let rest = url
            .strip_prefix("scylla://")
            .or_else(|| url.strip_prefix("cassandra://"))
            .ok_or(ConfigError::BadScheme)?;
        let (rest, query) = match rest.split_once('?') {
            Some((rest, query)) => (rest, Some(query)),
            None => (rest, None),
        };
        let (authority, keyspace) = rest.split_once('/').unwrap_or((rest, ""));
        let (userinfo, hosts) = match authority.rsplit_once('@') {
            Some((userinfo, hosts)) => (Some(userinfo), hosts),
            None => (None, authority),
        };
        let mut builder = ScyllaConfig::builder();
        for host in hosts.split(',').filter(|h| !h.is_empty()) {
            builder = builder.contact_point(host);
        }
        if !keyspace.is_empty() {
            builder = builder.keyspace(decode(keyspace)?);
        }
        if let Some(userinfo) = userinfo {
            let (user, password) = userinfo
                .split_once(':')
                .ok_or(ConfigError::BadCredentials)?;
            builder = builder.credentials(decode(user)?, decode(password)?);
        }
        let mut seen = HashSet::new();
        let mut tls = false;
        let mut ca_file = None;
        for pair in query.unwrap_or("").split('&').filter(|p| !p.is_empty()) {
            let (name, value) = pair.split_once('=').unwrap_or((pair, ""));
            let name = decode(name)?;
            let value = decode(value)?;
            if !seen.insert(name.clone()) {
                return Err(ConfigError::DuplicateParameter(name));
            }
            builder = match name.as_str() {
                "table" => builder.table(value),
                "replication" => builder.replication(value.parse()?),
                "consistency" => builder.consistency(value.parse()?),
                "serial_consistency" => builder.serial_consistency(value.parse()?),
                "tls" => {
                    tls = parse_bool("tls", &value)?;
                    builder
                }
                "tls_ca_file" => {
                    ca_file = Some(value);
                    builder
                }
                "timeout_ms" => builder.request_timeout(parse_millis("timeout_ms", &value)?),
                "connect_timeout_ms" => {
                    builder.connect_timeout(parse_millis("connect_timeout_ms", &value)?)
                }
                "create_schema" => builder.create_schema(parse_bool("create_schema", &value)?),
                _ => return Err(ConfigError::UnknownParameter(name)),
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

fn parse_bool(name: &'static str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "true" | "1" => Ok(true),
        "false" | "0" => Ok(false),
        _ => Err(ConfigError::BadBool {
            name,
            value: value.to_string(),
        }),
    }
}

fn parse_millis(name: &'static str, value: &str) -> Result<Duration, ConfigError> {
    match value.parse::<u64>() {
        Ok(ms) if ms > 0 => Ok(Duration::from_millis(ms)),
        _ => Err(ConfigError::BadTimeout {
            name,
            value: value.to_string(),
        }),
    }
}

/// Percent-decodes `s` (`+` is left alone: this is not a form).
fn decode(s: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadPercentEncoding(s.to_string());
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'%' {
            let hex = bytes.get(i + 1..i + 3).ok_or_else(bad)?;
            let hex = std::str::from_utf8(hex).map_err(|_| bad())?;
            out.push(u8::from_str_radix(hex, 16).map_err(|_| bad())?);
            i += 3;
        } else {
            out.push(bytes[i]);
            i += 1;
        }
    }
    String::from_utf8(out).map_err(|_| bad())
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::{Replication, SerialConsistency, WriteConsistency};

    #[test]
    fn full_url() {
        let config = ScyllaConfig::from_url(
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
            ("http://h/ks", ConfigError::BadScheme),
            ("scylla:///ks", ConfigError::NoContactPoints),
            ("scylla://h", ConfigError::NoKeyspace),
            ("scylla://h/", ConfigError::NoKeyspace),
            ("scylla://u@h/ks", ConfigError::BadCredentials),
            (
                "scylla://h/ks?tabel=x",
                ConfigError::UnknownParameter("tabel".into()),
            ),
            (
                "scylla://h/ks?table=a&table=b",
                ConfigError::DuplicateParameter("table".into()),
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
                ConfigError::BadBool {
                    name: "tls",
                    value: "yes".into(),
                },
            ),
            (
                "scylla://h/ks?timeout_ms=0",
                ConfigError::BadTimeout {
                    name: "timeout_ms",
                    value: "0".into(),
                },
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
            assert_eq!(ScyllaConfig::from_url(url).as_ref(), Err(expected), "{url}");
        }
    }

    #[test]
    fn minimal_url() {
        let config = ScyllaConfig::from_url("scylla://localhost/ks").unwrap();
        assert_eq!(config.contact_points(), ["localhost:9042"]);
        assert_eq!(
            config,
            ScyllaConfig::builder()
                .contact_point("localhost")
                .keyspace("ks")
                .build()
                .unwrap()
        );
    }
}
