//! Validated configuration: server, database, credentials, TLS, key prefix
//! and timeouts.

use std::{path::PathBuf, time::Duration};

use ttl_storage::kit::options::{self, ConnectOptions};

use crate::{
    error::ConfigError,
    replication::{SentinelSettings, WaitReplicas},
};

/// The default Valkey / Redis port.
pub const DEFAULT_PORT: u16 = 6379;
/// The default prefix of every key this driver writes.
pub const DEFAULT_PREFIX: &str = "ttl:";
/// The default timeout of one command. A command that times out after it
/// was sent is reported as outcome unknown (writes) or transient (reads).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = options::DEFAULT_REQUEST_TIMEOUT;
/// The default timeout for opening a connection (TLS handshake and `AUTH`
/// included).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = options::DEFAULT_CONNECT_TIMEOUT;

/// User name (optional, for Redis 6 ACLs) and password for `AUTH`.
pub(crate) type Credentials = ttl_storage::kit::Credentials<Option<String>>;

/// TLS settings. TLS is all or nothing: a TLS configuration never falls
/// back to plaintext.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM file with the CA certificate(s) the server's certificate is
    /// checked against; `None` uses the system's trust store.
    pub ca_file: Option<PathBuf>,
}

/// A validated configuration of [`crate::ValkeyStorage`].
///
/// Build one with [`ValkeyConfig::builder`] or parse a URL with
/// [`ValkeyConfig::from_url`].
///
/// ```
/// use std::time::Duration;
/// use storage_valkey::ValkeyConfig;
///
/// let config = ValkeyConfig::builder()
///     .host("10.0.0.5")
///     .password("s3cret")
///     .database(2)
///     .request_timeout(Duration::from_secs(2))
///     .build()
///     .unwrap();
/// assert_eq!(config.port(), 6379);
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ValkeyConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    pub(crate) database: Option<u8>,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) tls: Option<TlsSettings>,
    /// The key prefix and the timeouts (the CA file is in `tls`).
    pub(crate) options: ConnectOptions,
    pub(crate) sentinel: Option<SentinelSettings>,
    pub(crate) wait: Option<WaitReplicas>,
}

impl ValkeyConfig {
    /// A builder; [`ValkeyConfigBuilder::build`] validates everything.
    pub fn builder() -> ValkeyConfigBuilder {
        ValkeyConfigBuilder::default()
    }

    ttl_storage::server_getters!();

    /// The database selected after connecting (`None`: the server's default, 0).
    pub fn database(&self) -> Option<u8> {
        self.database
    }

    /// The ACL user name, if any.
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().and_then(|c| c.user.as_deref())
    }

    /// True when a password is configured (the password itself is not exposed).
    pub fn has_password(&self) -> bool {
        self.credentials.is_some()
    }

    /// TLS settings, `None` for plaintext.
    pub fn tls(&self) -> Option<&TlsSettings> {
        self.tls.as_ref()
    }

    ttl_storage::connect_getters!(prefix, request_timeout, connect_timeout);

    /// The Sentinels that name the primary, if the primary is discovered
    /// (`redis-sentinel://` URLs).
    pub fn sentinel(&self) -> Option<&SentinelSettings> {
        self.sentinel.as_ref()
    }

    /// The opt-in replica acknowledgement of each write, if set.
    pub fn wait_replicas(&self) -> Option<WaitReplicas> {
        self.wait
    }

    /// The server as a URL without credentials or parameters, for logs and
    /// error messages (`rediss://host:6380/2`,
    /// `redis-sentinel://s1:26379,s2:26379/service`).
    pub fn redacted_url(&self) -> String {
        let tls = if self.tls.is_some() { "s" } else { "" };
        let show = |host: &str, port: u16| match host.contains(':') {
            true => format!("[{host}]:{port}"),
            false => format!("{host}:{port}"),
        };
        let (scheme, host) = match &self.sentinel {
            Some(sentinel) => {
                let hosts: Vec<String> = sentinel
                    .sentinels
                    .iter()
                    .map(|(h, p)| show(h, *p))
                    .collect();
                (
                    format!("redis{tls}-sentinel"),
                    format!("{}/{}", hosts.join(","), sentinel.service),
                )
            }
            None => (format!("redis{tls}"), show(&self.host, self.port)),
        };
        let user = match (&self.credentials, self.user()) {
            (Some(_), Some(user)) => format!("{user}:***@"),
            (Some(_), None) => ":***@".to_string(),
            (None, _) => String::new(),
        };
        let db = self.database.map(|d| format!("/{d}")).unwrap_or_default();
        format!("{scheme}://{user}{host}{db}")
    }
}

/// Builds a [`ValkeyConfig`]; every setting but the host has a default.
#[derive(Debug, Clone)]
pub struct ValkeyConfigBuilder {
    host: Option<String>,
    port: u16,
    database: Option<u8>,
    user: Option<String>,
    password: Option<String>,
    tls: bool,
    pub(crate) options: ConnectOptions,
    sentinel: Option<SentinelSettings>,
    wait: Option<WaitReplicas>,
}

impl Default for ValkeyConfigBuilder {
    fn default() -> Self {
        ValkeyConfigBuilder {
            host: None,
            port: DEFAULT_PORT,
            database: None,
            user: None,
            password: None,
            tls: false,
            options: ConnectOptions::new(DEFAULT_PREFIX),
            sentinel: None,
            wait: None,
        }
    }
}

impl ValkeyConfigBuilder {
    ttl_storage::server_setters!(DEFAULT_PORT);

    /// The database to `SELECT` after connecting.
    pub fn database(mut self, database: u8) -> Self {
        self.database = Some(database);
        self
    }

    /// The ACL user name (Redis 6+); needs a [password](Self::password).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = Some(user.into());
        self
    }

    /// The password sent with `AUTH`.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// Connects with TLS (rustls); never falls back to plaintext.
    pub fn tls(mut self, tls: bool) -> Self {
        self.tls = tls;
        self
    }

    ttl_storage::connect_setters!(tls_ca_file, prefix, request_timeout, connect_timeout);

    /// Finds the primary through these Sentinels (any that answers), as
    /// the service `service`, instead of connecting to
    /// [`host`](Self::host); after a failover the driver reconnects to the
    /// promoted replica. Replaces the host and port.
    pub fn sentinel(mut self, sentinels: Vec<(String, u16)>, service: impl Into<String>) -> Self {
        self.sentinel = Some(SentinelSettings {
            sentinels,
            service: service.into(),
        });
        self
    }

    /// After each applied write, `WAIT` until `wait.replicas` replicas
    /// have it; a write they do not confirm within `wait.timeout` is
    /// outcome unknown, never success (off by default).
    pub fn wait_replicas(mut self, wait: WaitReplicas) -> Self {
        self.wait = Some(wait);
        self
    }

    /// Validates the settings.
    pub fn build(self) -> Result<ValkeyConfig, ConfigError> {
        if let Some(sentinel) = &self.sentinel {
            let bad = sentinel.sentinels.is_empty()
                || sentinel.sentinels.iter().any(|(h, _)| h.is_empty())
                || sentinel.service.is_empty()
                || sentinel.service.contains(['/', ' ']);
            if bad {
                return Err(ConfigError::BadSentinel);
            }
        }
        if let Some(wait) = self.wait
            && (wait.replicas == 0
                || wait.timeout.is_zero()
                || wait.timeout >= self.options.request_timeout)
        {
            return Err(ConfigError::BadWaitReplicas);
        }
        let host = match &self.sentinel {
            Some(sentinel) => sentinel.sentinels.first().map(|(h, _)| h.clone()),
            None => self.host,
        };
        let port = match &self.sentinel {
            Some(sentinel) => sentinel.sentinels.first().map_or(self.port, |(_, p)| *p),
            None => self.port,
        };
        let host = host.filter(|h| !h.is_empty()).ok_or(ConfigError::NoHost)?;
        let credentials = match (self.user, self.password) {
            (Some(_), None) => return Err(ConfigError::UserWithoutPassword),
            (user, Some(password)) => Some(Credentials { user, password }),
            (None, None) => None,
        };
        let mut options = self.options;
        let tls = match (self.tls, options.tls_ca_file.take()) {
            (true, ca_file) => Some(TlsSettings { ca_file }),
            (false, Some(_)) => return Err(ConfigError::CaFileWithoutTls),
            (false, None) => None,
        };
        if !options.prefix_is_valid() {
            return Err(ConfigError::BadPrefix(options.prefix));
        }
        options.check_timeouts()?;
        Ok(ValkeyConfig {
            host,
            port,
            database: self.database,
            credentials,
            tls,
            options,
            sentinel: self.sentinel,
            wait: self.wait,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttl_storage::kit::UrlError;

    #[test]
    fn validation() {
        assert_eq!(
            ValkeyConfig::builder().build().err(),
            Some(ConfigError::NoHost)
        );
        assert_eq!(
            ValkeyConfig::builder().host("h").user("u").build().err(),
            Some(ConfigError::UserWithoutPassword)
        );
        assert_eq!(
            ValkeyConfig::builder()
                .host("h")
                .tls_ca_file("/ca.pem")
                .build()
                .err(),
            Some(ConfigError::CaFileWithoutTls)
        );
        assert_eq!(
            ValkeyConfig::builder()
                .host("h")
                .prefix("a\nb")
                .build()
                .err(),
            Some(ConfigError::BadPrefix("a\nb".into()))
        );
        assert!(matches!(
            ValkeyConfig::builder()
                .host("h")
                .request_timeout(Duration::ZERO)
                .build(),
            Err(ConfigError::Url(UrlError::BadDuration {
                name: "timeout",
                ..
            }))
        ));
    }

    #[test]
    fn redacted_url_hides_the_password() {
        let config = ValkeyConfig::builder()
            .host("::1")
            .port(6380)
            .user("app")
            .password("p@ss")
            .tls(true)
            .database(3)
            .build()
            .unwrap();
        assert_eq!(config.redacted_url(), "rediss://app:***@[::1]:6380/3");
        assert!(!format!("{config:?}").contains("p@ss"));
        let plain = ValkeyConfig::builder().host("h").build().unwrap();
        assert_eq!(plain.redacted_url(), "redis://h:6379");
    }
}
