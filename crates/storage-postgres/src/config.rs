//! Validated configuration: server, database, credentials, TLS mode, table
//! and pool size, timeouts.

use std::{fmt, path::PathBuf, str::FromStr, time::Duration};

use ttl_storage::kit::options::{self, ConnectOptions};

use crate::error::ConfigError;

/// The default PostgreSQL port.
pub const DEFAULT_PORT: u16 = 5432;
/// The default table name.
pub const DEFAULT_TABLE: &str = "ttl_records";
/// The default number of pooled connections.
pub const DEFAULT_POOL_SIZE: usize = 8;
/// The default timeout of one statement. The server cancels a statement
/// after this (`statement_timeout`: not applied, transient); the client
/// gives up half a second later (outcome unknown for a write).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = options::DEFAULT_REQUEST_TIMEOUT;
/// The default timeout for opening a connection (TLS and authentication
/// included).
pub const DEFAULT_CONNECT_TIMEOUT: Duration = options::DEFAULT_CONNECT_TIMEOUT;

/// Longest identifier PostgreSQL keeps (NAMEDATALEN - 1).
const MAX_IDENTIFIER_LEN: usize = 63;
/// Largest pool accepted.
const MAX_POOL_SIZE: usize = 1024;

/// How the connection is protected, after libpq's `sslmode`.
///
/// Every TLS mode verifies the server's certificate chain *and* host name
/// (rustls offers nothing weaker), so `require` and `verify-ca` are as
/// strict as `verify-full`. `prefer` and `allow`, which silently fall back
/// to plaintext, are refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[non_exhaustive]
pub enum SslMode {
    /// Plaintext.
    #[default]
    Disable,
    /// TLS or nothing; certificate verified.
    Require,
    /// TLS or nothing; certificate verified.
    VerifyCa,
    /// TLS or nothing; certificate and host name verified.
    VerifyFull,
}

impl SslMode {
    /// True for every mode but [`SslMode::Disable`].
    pub fn uses_tls(self) -> bool {
        self != SslMode::Disable
    }
}

impl FromStr for SslMode {
    type Err = ConfigError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        match s {
            "disable" => Ok(SslMode::Disable),
            "require" => Ok(SslMode::Require),
            "verify-ca" => Ok(SslMode::VerifyCa),
            "verify-full" => Ok(SslMode::VerifyFull),
            "prefer" | "allow" => Err(ConfigError::FallbackSslMode(s.to_string())),
            _ => Err(ConfigError::BadSslMode(s.to_string())),
        }
    }
}

/// A validated configuration of [`crate::PostgresStorage`].
///
/// Build one with [`PostgresConfig::builder`] or parse a URL with
/// [`PostgresConfig::from_url`].
///
/// ```
/// use storage_postgres::{PostgresConfig, SslMode};
///
/// let config = PostgresConfig::builder()
///     .host("db.internal")
///     .user("leases")
///     .password("s3cret")
///     .dbname("app")
///     .ssl_mode(SslMode::VerifyFull)
///     .build()
///     .unwrap();
/// assert_eq!(config.table(), "ttl_records");
/// assert!(!format!("{config:?}").contains("s3cret"));
/// ```
#[derive(Clone, PartialEq, Eq)]
pub struct PostgresConfig {
    pub(crate) host: String,
    pub(crate) port: u16,
    /// Further servers of the same cluster, tried in order after the first
    /// (the first that accepts writes is used).
    pub(crate) other_hosts: Vec<(String, u16)>,
    pub(crate) user: String,
    pub(crate) password: Option<String>,
    pub(crate) dbname: String,
    pub(crate) ssl_mode: SslMode,
    pub(crate) schema: Option<String>,
    pub(crate) table: String,
    pub(crate) create_table: bool,
    pub(crate) pool_size: usize,
    /// The timeouts and the CA file (`sslrootcert`); no key prefix.
    pub(crate) options: ConnectOptions,
}

impl fmt::Debug for PostgresConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresConfig")
            .field("url", &self.redacted_url())
            .field("ssl_mode", &self.ssl_mode)
            .field("ssl_root_cert", &self.options.tls_ca_file)
            .field("table", &self.qualified_table())
            .field("create_table", &self.create_table)
            .field("pool_size", &self.pool_size)
            .field("request_timeout", &self.options.request_timeout)
            .field("connect_timeout", &self.options.connect_timeout)
            .finish()
    }
}

impl PostgresConfig {
    /// A builder; [`PostgresConfigBuilder::build`] validates everything.
    pub fn builder() -> PostgresConfigBuilder {
        PostgresConfigBuilder::default()
    }

    ttl_storage::server_getters!();

    /// Every server as `(host, port)`, the first one first: the driver
    /// connects to the first of them that accepts writes
    /// (`target_session_attrs=read-write`).
    pub fn hosts(&self) -> Vec<(&str, u16)> {
        std::iter::once((self.host.as_str(), self.port))
            .chain(self.other_hosts.iter().map(|(h, p)| (h.as_str(), *p)))
            .collect()
    }

    /// The user name.
    pub fn user(&self) -> &str {
        &self.user
    }

    /// The database.
    pub fn dbname(&self) -> &str {
        &self.dbname
    }

    /// The TLS mode.
    pub fn ssl_mode(&self) -> SslMode {
        self.ssl_mode
    }

    /// The PEM CA file trusted instead of the system's roots, if any.
    pub fn ssl_root_cert(&self) -> Option<&std::path::Path> {
        self.options.tls_ca_file.as_deref()
    }

    /// The table name (without schema).
    pub fn table(&self) -> &str {
        &self.table
    }

    /// The schema, `None` for the connection's search path.
    pub fn schema(&self) -> Option<&str> {
        self.schema.as_deref()
    }

    /// The table as written in SQL: `schema.table` or `table`.
    pub fn qualified_table(&self) -> String {
        match &self.schema {
            Some(schema) => format!("{schema}.{}", self.table),
            None => self.table.clone(),
        }
    }

    /// True when the table is created if missing.
    pub fn create_table(&self) -> bool {
        self.create_table
    }

    /// The number of pooled connections.
    pub fn pool_size(&self) -> usize {
        self.pool_size
    }

    ttl_storage::connect_getters!(request_timeout, connect_timeout);

    /// The server as a URL with the password replaced by `***`, for logs
    /// and error messages.
    pub fn redacted_url(&self) -> String {
        let hosts: Vec<String> = self
            .hosts()
            .into_iter()
            .map(|(host, port)| match host.contains(':') {
                true => format!("[{host}]:{port}"),
                false => format!("{host}:{port}"),
            })
            .collect();
        let password = if self.password.is_some() { ":***" } else { "" };
        format!(
            "postgres://{}{password}@{}/{}",
            self.user,
            hosts.join(","),
            self.dbname
        )
    }
}

/// Builds a [`PostgresConfig`]; every setting but the host has a default.
#[derive(Debug, Clone)]
pub struct PostgresConfigBuilder {
    host: Option<String>,
    port: u16,
    other_hosts: Vec<(String, u16)>,
    user: String,
    password: Option<String>,
    dbname: Option<String>,
    ssl_mode: SslMode,
    schema: Option<String>,
    table: String,
    create_table: bool,
    pool_size: usize,
    /// The timeouts and the CA file (`sslrootcert`); PostgreSQL has no
    /// key prefix.
    pub(crate) options: ConnectOptions,
}

impl Default for PostgresConfigBuilder {
    fn default() -> Self {
        PostgresConfigBuilder {
            host: None,
            port: DEFAULT_PORT,
            other_hosts: Vec::new(),
            user: "postgres".to_string(),
            password: None,
            dbname: None,
            ssl_mode: SslMode::default(),
            schema: None,
            table: DEFAULT_TABLE.to_string(),
            create_table: true,
            pool_size: DEFAULT_POOL_SIZE,
            options: ConnectOptions::new(""),
        }
    }
}

impl PostgresConfigBuilder {
    ttl_storage::server_setters!(DEFAULT_PORT);

    /// Another server of the same cluster (a standby that may be promoted),
    /// tried after the ones before it; repeatable. The driver always asks
    /// for a read-write session, so it connects to the current primary.
    pub fn other_host(mut self, host: impl Into<String>, port: u16) -> Self {
        self.other_hosts.push((host.into(), port));
        self
    }

    /// The user name (default `postgres`).
    pub fn user(mut self, user: impl Into<String>) -> Self {
        self.user = user.into();
        self
    }

    /// The password.
    pub fn password(mut self, password: impl Into<String>) -> Self {
        self.password = Some(password.into());
        self
    }

    /// The database (default: the user name).
    pub fn dbname(mut self, dbname: impl Into<String>) -> Self {
        self.dbname = Some(dbname.into());
        self
    }

    /// The TLS mode (default [`SslMode::Disable`]).
    pub fn ssl_mode(mut self, mode: SslMode) -> Self {
        self.ssl_mode = mode;
        self
    }

    /// Trusts the CA certificates in this PEM file instead of the system's
    /// trust store. Needs a TLS [`SslMode`].
    pub fn ssl_root_cert(mut self, path: impl Into<PathBuf>) -> Self {
        self.options.tls_ca_file = Some(path.into());
        self
    }

    /// The schema of the table (default: the search path, usually `public`).
    pub fn schema(mut self, schema: impl Into<String>) -> Self {
        self.schema = Some(schema.into());
        self
    }

    /// The table name (default [`DEFAULT_TABLE`]).
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = table.into();
        self
    }

    /// Creates the table when missing (default `true`).
    pub fn create_table(mut self, create: bool) -> Self {
        self.create_table = create;
        self
    }

    /// The number of pooled connections (default [`DEFAULT_POOL_SIZE`]).
    pub fn pool_size(mut self, size: usize) -> Self {
        self.pool_size = size;
        self
    }

    ttl_storage::connect_setters!(request_timeout, connect_timeout);

    /// Validates the settings.
    pub fn build(self) -> Result<PostgresConfig, ConfigError> {
        let host = self
            .host
            .filter(|h| !h.is_empty())
            .ok_or(ConfigError::NoHost)?;
        if self.user.is_empty() {
            return Err(ConfigError::NoUser);
        }
        let dbname = self.dbname.unwrap_or_else(|| self.user.clone());
        if self.options.tls_ca_file.is_some() && !self.ssl_mode.uses_tls() {
            return Err(ConfigError::RootCertWithoutTls);
        }
        check_identifier("table", &self.table)?;
        if let Some(schema) = &self.schema {
            check_identifier("schema", schema)?;
        }
        if self.pool_size == 0 || self.pool_size > MAX_POOL_SIZE {
            return Err(ConfigError::BadPoolSize(self.pool_size.to_string()));
        }
        self.options.check_timeouts()?;
        if self.other_hosts.iter().any(|(h, _)| h.is_empty()) {
            return Err(ConfigError::NoHost);
        }
        Ok(PostgresConfig {
            host,
            port: self.port,
            other_hosts: self.other_hosts,
            user: self.user,
            password: self.password,
            dbname,
            ssl_mode: self.ssl_mode,
            schema: self.schema,
            table: self.table,
            create_table: self.create_table,
            pool_size: self.pool_size,
            options: self.options,
        })
    }
}

/// Table and schema names are written into SQL unquoted: only plain
/// lower-case identifiers are accepted.
fn check_identifier(what: &'static str, name: &str) -> Result<(), ConfigError> {
    let mut chars = name.chars();
    let valid = name.len() <= MAX_IDENTIFIER_LEN
        && chars
            .next()
            .is_some_and(|c| c.is_ascii_lowercase() || c == '_')
        && chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if valid {
        Ok(())
    } else {
        Err(ConfigError::BadIdentifier {
            what,
            name: name.to_string(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn validation() {
        let base = || PostgresConfig::builder().host("h");
        assert_eq!(
            PostgresConfig::builder().build().err(),
            Some(ConfigError::NoHost)
        );
        assert_eq!(
            base().table("Leases").build().err(),
            Some(ConfigError::BadIdentifier {
                what: "table",
                name: "Leases".into()
            })
        );
        assert_eq!(
            base().schema("a;drop").build().err(),
            Some(ConfigError::BadIdentifier {
                what: "schema",
                name: "a;drop".into()
            })
        );
        assert_eq!(
            base().ssl_root_cert("/ca.pem").build().err(),
            Some(ConfigError::RootCertWithoutTls)
        );
        assert_eq!(
            base().pool_size(0).build().err(),
            Some(ConfigError::BadPoolSize("0".into()))
        );
        let config = base().build().unwrap();
        assert_eq!(config.dbname(), "postgres");
        assert_eq!(config.qualified_table(), "ttl_records");
        let config = base().schema("leases").user("app").build().unwrap();
        assert_eq!(config.dbname(), "app");
        assert_eq!(config.qualified_table(), "leases.ttl_records");
    }

    #[test]
    fn ssl_modes() {
        assert_eq!("disable".parse(), Ok(SslMode::Disable));
        assert_eq!("verify-full".parse(), Ok(SslMode::VerifyFull));
        assert_eq!(
            "prefer".parse::<SslMode>(),
            Err(ConfigError::FallbackSslMode("prefer".into()))
        );
        assert_eq!(
            "bogus".parse::<SslMode>(),
            Err(ConfigError::BadSslMode("bogus".into()))
        );
        assert!(SslMode::Require.uses_tls());
        assert!(!SslMode::Disable.uses_tls());
    }

    #[test]
    fn redacted() {
        let config = PostgresConfig::builder()
            .host("::1")
            .user("app")
            .password("pw")
            .build()
            .unwrap();
        assert_eq!(config.redacted_url(), "postgres://app:***@[::1]:5432/app");
        assert!(!format!("{config:?}").contains("pw\""));
    }
}
