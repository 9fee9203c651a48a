//! Validated configuration: contact points, schema names, replication,
//! consistency levels, credentials, TLS and timeouts.

use std::{path::PathBuf, time::Duration};

use crate::{
    consistency::{Replication, SerialConsistency, WriteConsistency},
    error::ConfigError,
};

/// The default CQL port.
pub const DEFAULT_PORT: u16 = 9042;
/// The default table name.
pub const DEFAULT_TABLE: &str = "ttl_records";
/// The default client-side request timeout. Longer than Cassandra's default
/// server-side `cas_contention_timeout` + `write_request_timeout`, so that the
/// server, not the client, reports a timeout (with its write type).
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(12);
/// The default timeout for opening a connection to a node.
pub const DEFAULT_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Longest keyspace or table name Cassandra accepts.
const MAX_IDENTIFIER_LEN: usize = 48;

pub(crate) use ttl_storage::kit::Credentials;

/// TLS settings: nodes are verified against a CA certificate file.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TlsSettings {
    /// PEM file with the CA certificate(s) that signed the nodes' certificates.
    /// Node certificates must name the node's IP address (the driver connects
    /// by address and checks it).
    pub ca_file: PathBuf,
}

/// A validated configuration of [`crate::CassandraStorage`].
///
/// Build one with [`CassandraConfig::builder`] or parse a URL with
/// [`CassandraConfig::from_url`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CassandraConfig {
    pub(crate) contact_points: Vec<String>,
    pub(crate) keyspace: String,
    pub(crate) table: String,
    pub(crate) replication: Option<Replication>,
    pub(crate) consistency: WriteConsistency,
    pub(crate) serial_consistency: SerialConsistency,
    pub(crate) credentials: Option<Credentials>,
    pub(crate) tls: Option<TlsSettings>,
    pub(crate) request_timeout: Duration,
    pub(crate) connect_timeout: Duration,
    pub(crate) create_schema: bool,
}

impl CassandraConfig {
    /// A builder; [`CassandraConfigBuilder::build`] validates everything.
    pub fn builder() -> CassandraConfigBuilder {
        CassandraConfigBuilder::default()
    }

    /// Contact points, as `host:port`.
    pub fn contact_points(&self) -> &[String] {
        &self.contact_points
    }

    /// The keyspace.
    pub fn keyspace(&self) -> &str {
        &self.keyspace
    }

    /// The table.
    pub fn table(&self) -> &str {
        &self.table
    }

    /// How the keyspace is replicated when this driver creates it.
    pub fn replication(&self) -> Option<&Replication> {
        self.replication.as_ref()
    }

    /// Commit consistency of writes.
    pub fn consistency(&self) -> WriteConsistency {
        self.consistency
    }

    /// Paxos consistency of every operation.
    pub fn serial_consistency(&self) -> SerialConsistency {
        self.serial_consistency
    }

    /// The user name, if authentication is configured.
    pub fn user(&self) -> Option<&str> {
        self.credentials.as_ref().map(|c| c.user.as_str())
    }

    /// TLS settings, if TLS is on.
    pub fn tls(&self) -> Option<&TlsSettings> {
        self.tls.as_ref()
    }

    /// Client-side timeout of each request.
    pub fn request_timeout(&self) -> Duration {
        self.request_timeout
    }

    /// Timeout for opening a connection.
    pub fn connect_timeout(&self) -> Duration {
        self.connect_timeout
    }

    /// Whether the keyspace and table are created when missing.
    pub fn create_schema(&self) -> bool {
        self.create_schema
    }
}

/// Builds a [`CassandraConfig`].
///
/// ```
/// use storage_cassandra::{Replication, CassandraConfig, SerialConsistency};
///
/// let config = CassandraConfig::builder()
///     .contact_point("10.0.0.1:9042")
///     .contact_point("10.0.0.2")
///     .keyspace("leases")
///     .replication(Replication::Simple(3))
///     .serial_consistency(SerialConsistency::Serial)
///     .create_schema(true)
///     .build()
///     .unwrap();
/// assert_eq!(config.contact_points(), ["10.0.0.1:9042", "10.0.0.2:9042"]);
/// assert_eq!(config.table(), "ttl_records");
/// ```
#[derive(Debug, Clone, Default)]
pub struct CassandraConfigBuilder {
    contact_points: Vec<String>,
    keyspace: Option<String>,
    table: Option<String>,
    replication: Option<Replication>,
    consistency: WriteConsistency,
    serial_consistency: SerialConsistency,
    credentials: Option<(String, String)>,
    tls: Option<TlsSettings>,
    request_timeout: Option<Duration>,
    connect_timeout: Option<Duration>,
    create_schema: bool,
}

impl CassandraConfigBuilder {
    /// Adds a contact point: `host`, `host:port` or `[ipv6]:port` (port 9042 by default).
    pub fn contact_point(mut self, node: impl Into<String>) -> Self {
        self.contact_points.push(node.into());
        self
    }

    /// The keyspace (lower-case identifier).
    pub fn keyspace(mut self, keyspace: impl Into<String>) -> Self {
        self.keyspace = Some(keyspace.into());
        self
    }

    /// The table (lower-case identifier); [`DEFAULT_TABLE`] by default.
    pub fn table(mut self, table: impl Into<String>) -> Self {
        self.table = Some(table.into());
        self
    }

    /// How to replicate the keyspace if this driver creates it.
    pub fn replication(mut self, replication: Replication) -> Self {
        self.replication = Some(replication);
        self
    }

    /// Commit consistency of writes; QUORUM by default.
    pub fn consistency(mut self, consistency: WriteConsistency) -> Self {
        self.consistency = consistency;
        self
    }

    /// Paxos consistency; SERIAL by default.
    pub fn serial_consistency(mut self, serial: SerialConsistency) -> Self {
        self.serial_consistency = serial;
        self
    }

    /// Authenticates with `PasswordAuthenticator`.
    pub fn credentials(mut self, user: impl Into<String>, password: impl Into<String>) -> Self {
        self.credentials = Some((user.into(), password.into()));
        self
    }

    /// Turns TLS on, verifying the nodes against the CA certificates in `ca_file` (PEM).
    /// Needs the crate's `tls` feature at connect time.
    pub fn tls_ca_file(mut self, ca_file: impl Into<PathBuf>) -> Self {
        self.tls = Some(TlsSettings {
            ca_file: ca_file.into(),
        });
        self
    }

    /// Client-side timeout of each request; [`DEFAULT_REQUEST_TIMEOUT`] by default.
    pub fn request_timeout(mut self, timeout: Duration) -> Self {
        self.request_timeout = Some(timeout);
        self
    }

    /// Timeout for opening a connection; [`DEFAULT_CONNECT_TIMEOUT`] by default.
    pub fn connect_timeout(mut self, timeout: Duration) -> Self {
        self.connect_timeout = Some(timeout);
        self
    }

    /// Creates the keyspace and table when missing (needs [`Self::replication`]).
    pub fn create_schema(mut self, create: bool) -> Self {
        self.create_schema = create;
        self
    }

    /// Validates the configuration.
    pub fn build(self) -> Result<CassandraConfig, ConfigError> {
        if self.contact_points.is_empty() {
            return Err(ConfigError::NoContactPoints);
        }
        let contact_points = self
            .contact_points
            .iter()
            .map(|node| normalize_contact_point(node))
            .collect::<Result<Vec<_>, _>>()?;
        let keyspace = self.keyspace.ok_or(ConfigError::NoKeyspace)?;
        check_identifier("keyspace", &keyspace)?;
        let table = self.table.unwrap_or_else(|| DEFAULT_TABLE.to_string());
        check_identifier("table", &table)?;
        if self.create_schema && self.replication.is_none() {
            return Err(ConfigError::ReplicationRequired);
        }
        let credentials = match self.credentials {
            Some((user, _)) if user.is_empty() => return Err(ConfigError::BadCredentials),
            Some((user, password)) => Some(Credentials { user, password }),
            None => None,
        };
        let request_timeout =
            positive("timeout_ms", self.request_timeout)?.unwrap_or(DEFAULT_REQUEST_TIMEOUT);
        let connect_timeout = positive("connect_timeout_ms", self.connect_timeout)?
            .unwrap_or(DEFAULT_CONNECT_TIMEOUT);
        Ok(CassandraConfig {
            contact_points,
            keyspace,
            table,
            replication: self.replication,
            consistency: self.consistency,
            serial_consistency: self.serial_consistency,
            credentials,
            tls: self.tls,
            request_timeout,
            connect_timeout,
            create_schema: self.create_schema,
        })
    }
}

fn positive(
    name: &'static str,
    timeout: Option<Duration>,
) -> Result<Option<Duration>, ConfigError> {
    match timeout {
        Some(t) if t.is_zero() => Err(ttl_storage::kit::UrlError::BadDuration {
            name,
            value: format!("{t:?}"),
        }
        .into()),
        other => Ok(other),
    }
}

/// Checks a keyspace or table name: a lower-case, unquoted CQL identifier.
fn check_identifier(what: &'static str, name: &str) -> Result<(), ConfigError> {
    let mut chars = name.chars();
    let starts_ok = chars.next().is_some_and(|c| c.is_ascii_lowercase());
    let rest_ok = chars.all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == '_');
    if starts_ok && rest_ok && name.len() <= MAX_IDENTIFIER_LEN {
        Ok(())
    } else {
        Err(ConfigError::BadIdentifier {
            what,
            name: name.to_string(),
        })
    }
}

/// `host` -> `host:9042`; checks `host:port` and `[v6]:port`.
fn normalize_contact_point(node: &str) -> Result<String, ConfigError> {
    let bad = || ConfigError::BadContactPoint(node.to_string());
    let node = node.trim();
    let host_ok = |host: &str| {
        !host.is_empty()
            && host
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_'))
    };
    let port_ok = |port: &str| port.parse::<u16>().is_ok_and(|p| p != 0);
    if let Some(rest) = node.strip_prefix('[') {
        let (host, after) = rest.split_once(']').ok_or_else(bad)?;
        if host.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(bad());
        }
        return match after {
            "" => Ok(format!("[{host}]:{DEFAULT_PORT}")),
            _ => match after.strip_prefix(':') {
                Some(port) if port_ok(port) => Ok(format!("[{host}]:{port}")),
                _ => Err(bad()),
            },
        };
    }
    match node.split_once(':') {
        None if host_ok(node) => Ok(format!("{node}:{DEFAULT_PORT}")),
        Some((host, port)) if host_ok(host) && port_ok(port) => Ok(format!("{host}:{port}")),
        _ => Err(bad()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base() -> CassandraConfigBuilder {
        CassandraConfig::builder()
            .contact_point("127.0.0.1")
            .keyspace("ks")
    }

    #[test]
    fn defaults() {
        let config = base().build().unwrap();
        assert_eq!(config.contact_points(), ["127.0.0.1:9042"]);
        assert_eq!(config.table(), DEFAULT_TABLE);
        assert_eq!(config.consistency(), WriteConsistency::Quorum);
        assert_eq!(config.serial_consistency(), SerialConsistency::Serial);
        assert_eq!(config.request_timeout(), DEFAULT_REQUEST_TIMEOUT);
        assert!(!config.create_schema());
        assert!(config.tls().is_none());
    }

    #[test]
    fn contact_points_are_checked() {
        for good in ["a.b-c_d", "h:1", "[::1]", "[::1]:9043", "10.0.0.1:9042"] {
            assert!(normalize_contact_point(good).is_ok(), "{good}");
        }
        assert_eq!(normalize_contact_point("[::1]").unwrap(), "[::1]:9042");
        for bad in [
            "", "h:", "h:0", "h:99999", "h:x", "[zz]:1", "[::1]x", "a b", "a/b",
        ] {
            assert_eq!(
                normalize_contact_point(bad),
                Err(ConfigError::BadContactPoint(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(
            CassandraConfig::builder().keyspace("ks").build(),
            Err(ConfigError::NoContactPoints)
        );
    }

    #[test]
    fn identifiers_are_checked() {
        assert_eq!(
            CassandraConfig::builder().contact_point("h").build(),
            Err(ConfigError::NoKeyspace)
        );
        for bad in ["", "Ks", "1ks", "k-s", "k\"s", &"k".repeat(49)] {
            assert!(
                matches!(
                    base().keyspace(bad).build(),
                    Err(ConfigError::BadIdentifier {
                        what: "keyspace",
                        ..
                    })
                ),
                "{bad}"
            );
            assert!(matches!(
                base().table(bad).build(),
                Err(ConfigError::BadIdentifier { what: "table", .. })
            ));
        }
        assert!(base().table("t_1").keyspace("k".repeat(48)).build().is_ok());
    }

    #[test]
    fn replication_parses() {
        assert_eq!("simple:3".parse(), Ok(Replication::Simple(3)));
        assert_eq!("SimpleStrategy:1".parse(), Ok(Replication::Simple(1)));
        assert_eq!(
            "dc1:3, dc-2:2".parse(),
            Ok(Replication::NetworkTopology(vec![
                ("dc1".into(), 3),
                ("dc-2".into(), 2)
            ]))
        );
        for bad in [
            "",
            "simple",
            "simple:0",
            "dc1:3,dc1:2",
            "simple:1,dc:1",
            "d'c:1",
            "dc:-1",
        ] {
            assert_eq!(
                bad.parse::<Replication>(),
                Err(ConfigError::BadReplication(bad.to_string())),
                "{bad}"
            );
        }
        assert_eq!(
            Replication::NetworkTopology(vec![("dc1".into(), 3)]).to_cql(),
            "{'class': 'NetworkTopologyStrategy', 'dc1': 3}"
        );
        assert_eq!(
            Replication::Simple(1).to_cql(),
            "{'class': 'SimpleStrategy', 'replication_factor': 1}"
        );
    }

    #[test]
    fn create_schema_needs_replication() {
        assert_eq!(
            base().create_schema(true).build(),
            Err(ConfigError::ReplicationRequired)
        );
        assert!(
            base()
                .create_schema(true)
                .replication(Replication::Simple(1))
                .build()
                .is_ok()
        );
    }

    #[test]
    fn consistency_levels_parse() {
        assert_eq!("local_quorum".parse(), Ok(WriteConsistency::LocalQuorum));
        assert_eq!("LOCAL_SERIAL".parse(), Ok(SerialConsistency::LocalSerial));
        assert!(matches!(
            "SERIAL".parse::<WriteConsistency>(),
            Err(ConfigError::BadConsistency(_))
        ));
        assert!(matches!(
            "QUORUM".parse::<SerialConsistency>(),
            Err(ConfigError::BadSerialConsistency(_))
        ));
    }

    #[test]
    fn credentials_and_timeouts_are_checked() {
        assert_eq!(
            base().credentials("", "x").build(),
            Err(ConfigError::BadCredentials)
        );
        let config = base().credentials("u", "secret").build().unwrap();
        assert_eq!(config.user(), Some("u"));
        assert!(!format!("{config:?}").contains("secret"));
        assert!(matches!(
            base().request_timeout(Duration::ZERO).build(),
            Err(ConfigError::Url(
                ttl_storage::kit::UrlError::BadDuration { .. }
            ))
        ));
    }
}
