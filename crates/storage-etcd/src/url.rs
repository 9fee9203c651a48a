//! Parsing `etcd://` / `etcds://` URLs into an [`EtcdConfig`].

use std::{collections::HashSet, time::Duration};

use percent_encoding::percent_decode_str;
use url::Url;

use crate::{config::EtcdConfig, error::ConfigError};

impl EtcdConfig {
    /// Parses a URL:
    ///
    /// ```text
    /// etcd://[user:password@]host[:port][?param=value&...]
    /// etcds://...        TLS; never falls back to plaintext
    /// ```
    ///
    /// More endpoints of the same cluster go in repeated `endpoint`
    /// parameters. User and password may be percent-encoded. Parameters
    /// (unknown ones are errors):
    ///
    /// | parameter | meaning | default |
    /// |---|---|---|
    /// | `endpoint` | another `host[:port]` (repeatable) | none |
    /// | `prefix` | prefix of every key | `ttl/` |
    /// | `timeout` | timeout of one request (`500ms`, `5s`, ...) | `5s` |
    /// | `connect_timeout` | timeout for opening a connection | `5s` |
    /// | `tls_ca_file` | PEM CA file to trust (TLS only) | the system's roots |
    ///
    /// ```
    /// use storage_etcd::EtcdConfig;
    ///
    /// let config = EtcdConfig::from_url(
    ///     "etcds://app:s%40cret@10.0.0.1?endpoint=10.0.0.2:2379&prefix=leases/&timeout=2s",
    /// )
    /// .unwrap();
    /// assert_eq!(config.endpoints(), ["10.0.0.1:2379", "10.0.0.2:2379"]);
    /// assert_eq!(config.user(), Some("app"));
    /// assert!(config.tls());
    /// assert_eq!(config.redacted_url(), "etcds://app:***@10.0.0.1:2379,10.0.0.2:2379");
    /// ```
    pub fn from_url(url: &str) -> Result<EtcdConfig, ConfigError> {
        let parsed = Url::parse(url).map_err(|err| ConfigError::BadUrl(err.to_string()))?;
        let tls = match parsed.scheme() {
            "etcd" => false,
            "etcds" => true,
            other => return Err(ConfigError::BadScheme(other.to_string())),
        };
        let host = parsed
            .host_str()
            .filter(|h| !h.is_empty())
            .ok_or(ConfigError::NoEndpoint)?;
        let first = match parsed.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_string(),
        };
        let mut builder = EtcdConfig::builder().endpoint(first).tls(tls);
        match (parsed.username(), parsed.password()) {
            ("", None) => {}
            (user, Some(password)) if !user.is_empty() => {
                builder =
                    builder.credentials(decode(user, "user name")?, decode(password, "password")?);
            }
            _ => return Err(ConfigError::BadCredentials),
        }
        let mut seen = HashSet::new();
        for (name, value) in parsed.query_pairs() {
            if name != "endpoint" && !seen.insert(name.to_string()) {
                return Err(ConfigError::DuplicateParameter(name.into_owned()));
            }
            builder = match name.as_ref() {
                "endpoint" => builder.endpoint(value.into_owned()),
                "prefix" => builder.prefix(value.into_owned()),
                "timeout" => builder.request_timeout(parse_duration("timeout", &value)?),
                "connect_timeout" => {
                    builder.connect_timeout(parse_duration("connect_timeout", &value)?)
                }
                "tls_ca_file" => builder.tls_ca_file(value.into_owned()),
                _ => return Err(ConfigError::UnknownParameter(name.into_owned())),
            };
        }
        builder.build()
    }
}

fn decode(text: &str, what: &'static str) -> Result<String, ConfigError> {
    percent_decode_str(text)
        .decode_utf8()
        .map(|s| s.into_owned())
        .map_err(|_| ConfigError::BadPercentEncoding(what))
}

fn parse_duration(name: &'static str, value: &str) -> Result<Duration, ConfigError> {
    ttl_storage::kit::query::parse_duration(value).ok_or_else(|| ConfigError::BadDuration {
        name,
        value: value.to_string(),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn minimal_url() {
        let config = EtcdConfig::from_url("etcd://localhost").unwrap();
        assert_eq!(config.endpoints(), ["localhost:2379"]);
        assert_eq!(config.prefix(), "ttl/");
        assert!(!config.tls());
    }

    #[test]
    fn bad_urls_have_typed_errors() {
        let cases: &[(&str, ConfigError)] = &[
            ("http://h", ConfigError::BadScheme("http".into())),
            ("etcd://u@h", ConfigError::BadCredentials),
            (
                "etcd://h?prefx=a",
                ConfigError::UnknownParameter("prefx".into()),
            ),
            (
                "etcd://h?prefix=a&prefix=b",
                ConfigError::DuplicateParameter("prefix".into()),
            ),
            (
                "etcd://h?tls_ca_file=/ca.pem",
                ConfigError::CaFileWithoutTls,
            ),
            (
                "etcd://h?timeout=5",
                ConfigError::BadDuration {
                    name: "timeout",
                    value: "5".into(),
                },
            ),
            (
                "etcd://h?endpoint=x:99999",
                ConfigError::BadEndpoint("x:99999".into()),
            ),
        ];
        for (url, expected) in cases {
            assert_eq!(EtcdConfig::from_url(url).as_ref(), Err(expected), "{url}");
        }
    }

    #[test]
    fn errors_never_show_the_password() {
        let err = EtcdConfig::from_url("etcd://u:hunter2@h?bogus=1").unwrap_err();
        assert!(!err.to_string().contains("hunter2"), "{err}");
        let config = EtcdConfig::from_url("etcd://u:hunter2@h").unwrap();
        assert!(!format!("{config:?}").contains("hunter2"));
    }
}
