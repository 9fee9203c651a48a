//! Parsing `etcd://` / `etcds://` URLs into an [`EtcdConfig`].

use ttl_storage::kit::{
    UrlError,
    options::Param,
    url::{decode, params, parse},
};

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
        let parsed = parse(url)?;
        let tls = match parsed.scheme() {
            "etcd" => false,
            "etcds" => true,
            other => {
                return Err(UrlError::BadScheme {
                    scheme: other.to_string(),
                    expected: "etcd:// or etcds://",
                }
                .into());
            }
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
        for (name, value) in params(&parsed, &["endpoint"])? {
            if builder.options.apply(Param::ALL, &name, &value)? {
                continue;
            }
            builder = match name.as_str() {
                "endpoint" => builder.endpoint(value),
                _ => return Err(UrlError::UnknownParameter(name).into()),
            };
        }
        builder.build()
    }
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
            (
                "http://h",
                UrlError::BadScheme {
                    scheme: "http".into(),
                    expected: "etcd:// or etcds://",
                }
                .into(),
            ),
            ("etcd://u@h", ConfigError::BadCredentials),
            (
                "etcd://h?prefx=a",
                UrlError::UnknownParameter("prefx".into()).into(),
            ),
            (
                "etcd://h?prefix=a&prefix=b",
                UrlError::DuplicateParameter("prefix".into()).into(),
            ),
            (
                "etcd://h?tls_ca_file=/ca.pem",
                ConfigError::CaFileWithoutTls,
            ),
            (
                "etcd://h?timeout=5",
                UrlError::BadDuration {
                    name: "timeout",
                    value: "5".into(),
                }
                .into(),
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
