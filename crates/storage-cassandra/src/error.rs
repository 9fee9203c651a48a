//! Configuration errors: what is wrong with a URL or a builder, found
//! before connecting. (Errors of operations are classified in `classify.rs`.)

/// A configuration that cannot be used, found before connecting.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// What every driver's URL can have wrong (syntax, a scheme other
    /// than `scylla://` or `cassandra://`, parameters unknown or given
    /// twice, boolean values, timeouts: zero or not a duration, or for the
    /// older `_ms` forms not a whole number of milliseconds).
    #[error(transparent)]
    Url(#[from] ttl_storage::kit::UrlError),
    /// No contact point was given.
    #[error("at least one contact point is required")]
    NoContactPoints,
    /// A contact point is not `host` or `host:port`.
    #[error("bad contact point {0:?}: expected host, host:port or [ipv6]:port")]
    BadContactPoint(String),
    /// No keyspace was given.
    #[error("a keyspace is required")]
    NoKeyspace,
    /// A keyspace or table name is not a plain lower-case CQL identifier.
    #[error(
        "bad {what} name {name:?}: use 1 to 48 lower-case ASCII letters, digits and '_', starting with a letter"
    )]
    BadIdentifier {
        /// `keyspace` or `table`.
        what: &'static str,
        /// The rejected name.
        name: String,
    },
    /// The replication setting cannot be parsed or is out of range.
    #[error("bad replication {0:?}: expected simple:<rf> or <dc>:<rf>[,<dc>:<rf>...] with rf >= 1")]
    BadReplication(String),
    /// `create_schema` was asked without saying how to replicate the keyspace.
    #[error("create_schema needs a replication setting (replication=simple:<rf> or <dc>:<rf>,...)")]
    ReplicationRequired,
    /// An unknown consistency level name.
    #[error(
        "bad consistency {0:?}: expected ONE, TWO, THREE, QUORUM, ALL, LOCAL_QUORUM, EACH_QUORUM or LOCAL_ONE"
    )]
    BadConsistency(String),
    /// An unknown serial consistency level name.
    #[error("bad serial consistency {0:?}: expected SERIAL or LOCAL_SERIAL")]
    BadSerialConsistency(String),
    /// A user name without a password, or the reverse, or an empty user name.
    #[error("credentials need a non-empty user name and a password")]
    BadCredentials,
    /// A `%` escape in the URL that is not two hex digits or not UTF-8.
    #[error("bad percent-encoding in {0:?}")]
    BadPercentEncoding(String),
    /// TLS was asked without a CA certificate file to verify the nodes against.
    #[error("tls needs a CA certificate file (tls_ca_file=/path/to/ca.pem)")]
    TlsCaRequired,
    /// A CA file was given but TLS is off.
    #[error("tls_ca_file is set but tls is off")]
    TlsCaWithoutTls,
}
