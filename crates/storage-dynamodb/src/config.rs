//! Configuration: from a `dynamodb://` URL or a builder, validated up front.

use std::{fmt, time::Duration};

use crate::ConfigError;

/// Default connect timeout.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(2);
/// Default timeout of one request (one attempt of one operation).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(3);
/// Default number of attempts for errors that certainly were not applied.
pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;

/// Explicit static credentials (instead of the default AWS chain).
#[derive(Clone, PartialEq, Eq)]
pub struct StaticCredentials {
    pub(crate) access_key_id: String,
    pub(crate) secret_access_key: String,
    pub(crate) session_token: Option<String>,
}

impl fmt::Debug for StaticCredentials {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StaticCredentials")
            .field("access_key_id", &self.access_key_id)
            .field("secret_access_key", &"** redacted **")
            .field(
                "session_token",
                &self.session_token.as_ref().map(|_| "** redacted **"),
            )
            .finish()
    }
}

/// How the driver decides that a record has expired.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum ExpiryMode {
    /// Each record stores its expiry as wall-clock milliseconds since the
    /// Unix epoch, computed by the writer; every operation compares it with
    /// the caller's wall clock inside the conditional write. Assumes the
    /// clocks of all clients agree within a known bound (see the crate docs).
    #[default]
    WallClock,
    /// Independent of clock offsets between machines, like Amazon's DynamoDB
    /// Lock Client: every write stores a fresh random version; an instance
    /// treats a record as expired once it has seen the same version,
    /// unchanged, for a full lease on its own monotonic clock, and takes it
    /// over with a write conditioned on that version. The cost: expiry is
    /// per observer, so an instance that first looks at a record late waits
    /// a full lease from that first look (up to twice the TTL after the last
    /// renewal), and `get` from different instances may disagree about an
    /// expiring record. Each instance keeps one small entry per key it has
    /// touched and that still exists. All clients of one table must use the
    /// same mode.
    ObservedLease,
}

/// A validated configuration of [`crate::DynamoDbStorage`].
///
/// Build one with [`DynamoDbConfig::builder`] or parse a URL:
///
/// ```
/// use std::time::Duration;
/// use storage_dynamodb::DynamoDbConfig;
///
/// let config: DynamoDbConfig =
///     "dynamodb://leases?region=eu-west-1&endpoint=http://127.0.0.1:8000&create_table=true"
///         .parse()
///         .unwrap();
/// assert_eq!(config.table(), "leases");
/// assert_eq!(config.region(), Some("eu-west-1"));
/// assert!(config.create_table());
///
/// let config = DynamoDbConfig::builder("leases")
///     .region("us-east-1")
///     .request_timeout(Duration::from_secs(2))
///     .build()
///     .unwrap();
/// assert_eq!(config.endpoint(), None);
/// assert!("dynamodb://x?region=eu-west-1".parse::<DynamoDbConfig>().is_err()); // table too short
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DynamoDbConfig {
    pub(crate) table: String,
    pub(crate) region: Option<String>,
    pub(crate) endpoint: Option<String>,
    pub(crate) credentials: Option<StaticCredentials>,
    pub(crate) create_table: bool,
    pub(crate) connect_timeout: Duration,
    pub(crate) request_timeout: Duration,
    pub(crate) max_attempts: u32,
    pub(crate) expiry_mode: ExpiryMode,
}

impl DynamoDbConfig {
    /// A builder for the table `table`, with defaults for everything else.
    pub fn builder(table: impl Into<String>) -> DynamoDbConfigBuilder {
        DynamoDbConfigBuilder {
            config: DynamoDbConfig {
                table: table.into(),
                region: None,
                endpoint: None,
                credentials: None,
                create_table: false,
                connect_timeout: DEFAULT_CONNECT_TIMEOUT,
                request_timeout: DEFAULT_REQUEST_TIMEOUT,
                max_attempts: DEFAULT_MAX_ATTEMPTS,
                expiry_mode: ExpiryMode::WallClock,
            },
        }
    }

    /// The table name.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The region, if set (otherwise the AWS chain decides).
    pub fn region(&self) -> Option<&str> {
        self.region.as_deref()
    }

    /// The endpoint override (DynamoDB Local), if set.
    pub fn endpoint(&self) -> Option<&str> {
        self.endpoint.as_deref()
    }

    /// Whether [`crate::DynamoDbStorage::connect`] creates the table when it is missing.
    pub fn create_table(&self) -> bool {
        self.create_table
    }

    /// The connect timeout.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// The timeout of one request.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Attempts per operation for errors that certainly were not applied.
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// How expiry is decided.
    pub fn expiry_mode(&self) -> ExpiryMode {
        self.expiry_mode
    }

    fn validate(&self) -> Result<(), ConfigError> {
        let table_ok = (3..=255).contains(&self.table.len())
            && self
                .table
                .bytes()
                .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'_' | b'-' | b'.'));
        if !table_ok {
            return Err(ConfigError::InvalidTable(self.table.clone()));
        }
        if let Some(region) = &self.region {
            let ok = !region.is_empty()
                && region.len() <= 64
                && region
                    .bytes()
                    .all(|b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'-');
            if !ok {
                return Err(ConfigError::InvalidRegion(region.clone()));
            }
        }
        if let Some(endpoint) = &self.endpoint {
            let ok = url::Url::parse(endpoint).is_ok_and(|u| {
                matches!(u.scheme(), "http" | "https")
                    && u.host_str().is_some_and(|h| !h.is_empty())
                    && u.query().is_none()
                    && u.fragment().is_none()
            });
            if !ok {
                return Err(ConfigError::InvalidEndpoint(endpoint.clone()));
            }
        }
        for (name, value) in [
            ("connect_timeout", self.connect_timeout),
            ("request_timeout", self.request_timeout),
        ] {
            if value.is_zero() || value > Duration::from_secs(600) {
                return Err(ConfigError::InvalidTimeout { name, value });
            }
        }
        if !(1..=10).contains(&self.max_attempts) {
            return Err(ConfigError::InvalidMaxAttempts(self.max_attempts));
        }
        if let Some(c) = &self.credentials
            && (c.access_key_id.is_empty() || c.secret_access_key.is_empty())
        {
            return Err(ConfigError::InvalidCredentials);
        }
        Ok(())
    }
}

/// Builds a [`DynamoDbConfig`]; [`DynamoDbConfigBuilder::build`] validates it.
#[derive(Debug, Clone)]
#[must_use]
pub struct DynamoDbConfigBuilder {
    config: DynamoDbConfig,
}

impl DynamoDbConfigBuilder {
    /// The AWS region (default: from the AWS chain: `AWS_REGION`, profile, IMDS).
    pub fn region(mut self, region: impl Into<String>) -> Self {
        self.config.region = Some(region.into());
        self
    }

    /// An endpoint override, such as `http://127.0.0.1:8000` for DynamoDB Local.
    pub fn endpoint(mut self, endpoint: impl Into<String>) -> Self {
        self.config.endpoint = Some(endpoint.into());
        self
    }

    /// Static credentials instead of the default AWS credentials chain.
    pub fn credentials(
        mut self,
        access_key_id: impl Into<String>,
        secret_access_key: impl Into<String>,
        session_token: Option<String>,
    ) -> Self {
        self.config.credentials = Some(StaticCredentials {
            access_key_id: access_key_id.into(),
            secret_access_key: secret_access_key.into(),
            session_token,
        });
        self
    }

    /// Create the table (on-demand billing, TTL enabled) if it does not exist.
    pub fn create_table(mut self, create: bool) -> Self {
        self.config.create_table = create;
        self
    }

    /// The TCP/TLS connect timeout (default [`DEFAULT_CONNECT_TIMEOUT`]).
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.config.connect_timeout = timeout;
        self
    }

    /// The timeout of one request (default [`DEFAULT_REQUEST_TIMEOUT`]).
    /// Keep it well under the lease TTL: a conditional write that times out
    /// is reported as [`ttl_storage::ErrorKind::OutcomeUnknown`].
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.config.request_timeout = timeout;
        self
    }

    /// Attempts per operation (default [`DEFAULT_MAX_ATTEMPTS`]); only errors
    /// that prove the request was not applied (throttling, refused
    /// connection) are retried.
    pub fn max_attempts(mut self, attempts: u32) -> Self {
        self.config.max_attempts = attempts;
        self
    }

    /// How expiry is decided (default [`ExpiryMode::WallClock`]).
    pub fn expiry_mode(mut self, mode: ExpiryMode) -> Self {
        self.config.expiry_mode = mode;
        self
    }

    /// Validates and returns the configuration.
    pub fn build(self) -> Result<DynamoDbConfig, ConfigError> {
        self.config.validate()?;
        Ok(self.config)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ttl_storage::kit::UrlError;

    #[test]
    fn parses_full_url() {
        let c = DynamoDbConfig::from_url(
            "dynamodb://my-table.v1?region=eu-west-1&endpoint=http://127.0.0.1:8000&create_table=true&connect_timeout_ms=500&request_timeout_ms=1500&max_attempts=2&expiry=observed_lease",
        )
        .unwrap();
        assert_eq!(c.table(), "my-table.v1");
        assert_eq!(c.region(), Some("eu-west-1"));
        assert_eq!(c.endpoint(), Some("http://127.0.0.1:8000"));
        assert!(c.create_table());
        assert_eq!(c.connect_timeout(), Duration::from_millis(500));
        assert_eq!(c.request_timeout(), Duration::from_millis(1500));
        assert_eq!(c.max_attempts(), 2);
        assert_eq!(c.expiry_mode(), ExpiryMode::ObservedLease);
    }

    #[test]
    fn defaults_from_minimal_url() {
        let c: DynamoDbConfig = "dynamodb://leases".parse().unwrap();
        assert_eq!(c.region(), None);
        assert_eq!(c.endpoint(), None);
        assert!(!c.create_table());
        assert_eq!(c.request_timeout(), DEFAULT_REQUEST_TIMEOUT);
        assert_eq!(c.max_attempts(), DEFAULT_MAX_ATTEMPTS);
        assert_eq!(c.expiry_mode(), ExpiryMode::WallClock);
    }

    #[test]
    fn rejects_bad_urls() {
        let err = |s: &str| DynamoDbConfig::from_url(s).unwrap_err();
        assert!(matches!(
            err("not a url"),
            ConfigError::Url(UrlError::NotAUrl(_))
        ));
        assert_eq!(
            err("redis://leases"),
            ConfigError::Url(UrlError::BadScheme {
                scheme: "redis".into(),
                expected: "dynamodb://"
            })
        );
        assert_eq!(err("dynamodb://ab"), ConfigError::InvalidTable("ab".into()));
        assert_eq!(err("dynamodb:///x"), ConfigError::InvalidTable("".into()));
        assert_eq!(
            err("dynamodb://leases?region=EU%20WEST"),
            ConfigError::InvalidRegion("EU WEST".into())
        );
        assert_eq!(
            err("dynamodb://leases?endpoint=ftp://host"),
            ConfigError::InvalidEndpoint("ftp://host".into())
        );
        assert_eq!(
            err("dynamodb://leases?colour=red"),
            ConfigError::Url(UrlError::UnknownParameter("colour".into()))
        );
        assert_eq!(
            err("dynamodb://leases?region=a&region=b"),
            ConfigError::Url(UrlError::DuplicateParameter("region".into()))
        );
        assert!(matches!(
            err("dynamodb://leases?expiry=ntp"),
            ConfigError::InvalidParameter { .. }
        ));
        assert!(matches!(
            err("dynamodb://leases?create_table=yes"),
            ConfigError::InvalidParameter { .. }
        ));
        assert!(matches!(
            err("dynamodb://leases?request_timeout_ms=0"),
            ConfigError::InvalidTimeout {
                name: "request_timeout",
                ..
            }
        ));
        assert_eq!(
            err("dynamodb://leases?max_attempts=0"),
            ConfigError::InvalidMaxAttempts(0)
        );
    }

    #[test]
    fn builder_validates_credentials_and_redacts_secrets() {
        assert_eq!(
            DynamoDbConfig::builder("leases")
                .credentials("", "secret", None)
                .build(),
            Err(ConfigError::InvalidCredentials)
        );
        let c = DynamoDbConfig::builder("leases")
            .credentials("AKID", "very-secret", Some("token".into()))
            .build()
            .unwrap();
        let debug = format!("{c:?}");
        assert!(debug.contains("AKID"));
        assert!(!debug.contains("very-secret"));
        assert!(!debug.contains("token\""));
    }
}
