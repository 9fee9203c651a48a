//! Validated configuration: endpoints, credentials, TLS, key prefix and
//! timeouts.

use std::time::Duration;

use ttl_storage::kit::options::{self, ConnectOptions};

use crate::error::ConfigError;

/// The default etcd client port.
pub const DEFAULT_PORT: u16 = 2379;
/// The default prefix of every key this driver writes.
pub const DEFAULT_PREFIX: &str = "ttl/";
/// The default timeout of one request.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = options::DEFAULT_REQUEST_TIMEOUT;
/// The default timeout for opening a connection.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = options::DEFAULT_CONNECT_TIMEOUT;

pub(crate) use ttl_storage::kit::Credentials;

/// A validated configuration of [`crate::EtcdStorage`].
///
/// ```
/// use storage_etcd::EtcdConfig;
///
/// let config = EtcdConfig::builder()
///     .endpoint("10.0.0.1:2379")
///     .endpoint("10.0.0.2")
///     .credentials("app", "s3cret")
///     .build()
///     .unwrap();
/// assert_eq!(config.endpoints(), ["10.0.0.1:2379", "10.0.0.2:2379"]);
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EtcdConfig {
    pub(crate) endpoints: Vec<String>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) tls: bool,
    pub(crate) options: ConnectOptions,
}

impl EtcdConfig {
    /// A builder; [`EtcdConfigBuilder::build`] validates everything.
    pub fn builder() -> EtcdConfigBuilder {
        EtcdConfigBuilder::default()
    }

    /// Endpoints, as `host:port`.
    pub fn endpoints(&self) -> &[String] {
        &self.endpoints
    }

    /// The user name, if any.
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|c| c.user.as_str())
    }

    /// True for TLS (`https://` endpoints); never falls back to plaintext.
    pub fn tls(&self) -> bool {
        self.tls
    }

    /// The PEM CA file trusted for TLS, if any (otherwise the system's roots).
    pub fn ca_file(&self) -> Option<&std::path::Path> {
        self.options.tls_ca_file.as_deref()
    }

    ttl_storage::connect_getters!(prefix, request_timeout, connect_timeout);

    /// The endpoints as URLs for the client (`http://` or `https://`).
    pub(crate) fn endpoint_urls(&self) -> Vec<String> {
        let scheme = if self.tls { "https" } else { "http" };
        self.endpoints
            .iter()
            .map(|e| format!("{scheme}://{e}"))
            .collect()
    }

    /// The cluster as a URL without the password, for logs and errors.
    pub fn redacted_url(&self) -> String {
        let scheme = if self.tls { "etcds" } else { "etcd" };
        let user = match self.user() {
            Some(user) => format!("{user}:***@"),
            None => String::new(),
        };
        format!("{scheme}://{user}{}", self.endpoints.join(","))
    }
}

/// Builds an [`EtcdConfig`]; at least one endpoint is required.
#[derive(Debug, Clone)]
pub struct EtcdConfigBuilder {
    endpoints: Vec<String>,
    credentials: Option<(String, String)>,
    tls: bool,
    pub(crate) options: ConnectOptions,
}

impl Default for EtcdConfigBuilder {
    fn default() -> Self {
        EtcdConfigBuilder {
            endpoints: Vec::new(),
            credentials: None,
            tls: false,
            options: ConnectOptions::new(DEFAULT_PREFIX),
        }
    }
}

impl EtcdConfigBuilder {
    /// Adds an endpoint, `host` or `host:port` (default port [`DEFAULT_PORT`]).
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.endpoints.push(endpoint.into());
        self
    }

    /// User name and password.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Connects with TLS; never falls back to plaintext.
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    ttl_storage::connect_setters!(tls_ca_file, prefix, request_timeout, connect_timeout);

    /// Validates the settings.
    pub fn build(self) -> Result<EtcdConfig, ConfigError> {
        if self.endpoints.is_empty() {
            return Err(ConfigError::NoEndpoint);
        }
        let endpoints = self
            .endpoints
            .iter()
            .map(|e| normalize_endpoint(e))
            .collect::<Result<Vec<_>, _>>()?;
        let credentials = match self.credentials {
            Some((user, _)) if user.is_empty() => return Err(ConfigError::BadCredentials),
            Some((user, password)) => Some(Credentials { user, password }),
            None => None,
        };
        let options = self.options;
        if options.tls_ca_file.is_some() && !self.tls {
            return Err(ConfigError::CaFileWithoutTls);
        }
        if !options.prefix_is_valid() {
            return Err(ConfigError::BadPrefix(options.prefix));
        }
        options.check_timeouts()?;
        Ok(EtcdConfig {
            endpoints,
            credentials,
            tls: self.tls,
            options,
        })
    }
}

/// `host`, `host:port`, `[v6]` or `[v6]:port` as `host:port`.
fn normalize_endpoint(endpoint: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadEndpoint(endpoint.to_string());
    let parsed = url::Url::parse(&format!("etcd://{endpoint}")).map_err(|_| bad())?;
    let host = parsed
        .host_str()
        .filter(|h| !h.is_empty())
        .ok_or_else(bad)?;
    if parsed.path() != "" || parsed.query().is_some() || !parsed.username().is_empty() {
        return Err(bad());
    }
    Ok(format!("{host}:{}", parsed.port().unwrap_or(DEFAULT_PORT)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        assert_eq!(
            EtcdConfig::builder().build().err(),
            Some(ConfigError::NoEndpoint)
        );
        assert_eq!(
            EtcdConfig::builder().endpoint("h:99999").build().err(),
            Some(ConfigError::BadEndpoint("h:99999".into()))
        );
        assert_eq!(
            EtcdConfig::builder()
                .endpoint("h")
                .tls_ca_file("/ca.pem")
                .build()
                .err(),
            Some(ConfigError::CaFileWithoutTls)
        );
        let config = EtcdConfig::builder()
            .endpoint("[::1]:2380")
            .tls(true)
            .credentials("u", "pw")
            .build()
            .unwrap();
        assert_eq!(config.endpoint_urls(), ["https://[::1]:2380"]);
        assert_eq!(config.redacted_url(), "etcds://u:***@[::1]:2380");
    }
}
