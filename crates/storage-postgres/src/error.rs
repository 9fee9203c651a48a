//! Configuration errors, and how tokio-postgres and pool errors map to the
//! contract's [`ErrorKind`]s.

use deadpool_postgres::PoolError;
use tokio_postgres::error::SqlState;
use ttl_storage::{ErrorKind, StorageError};

/// A configuration that cannot be used, found before connecting.
///
/// Messages never contain a password.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// What every driver's URL can have wrong (syntax, scheme,
    /// percent-encoding, parameters unknown or given twice, values).
    #[error(transparent)]
    Url(#[from] ttl_storage::kit::UrlError),
    /// No host was given.
    #[error("a host is required")]
    NoHost,
    /// One of several comma-separated servers is not `host[:port]`.
    #[error("bad server {0:?} in the host list: expected host[:port]")]
    BadHost(String),
    /// `target_session_attrs` other than `read-write` (the driver always
    /// needs a server that accepts writes).
    #[error("target_session_attrs {0:?} is not supported: the driver always uses read-write")]
    BadTargetSessionAttrs(String),
    /// The user name is empty.
    #[error("a user name is required")]
    NoUser,
    /// An unknown `sslmode`.
    #[error("bad sslmode {0:?}: expected disable, require, verify-ca or verify-full")]
    BadSslMode(String),
    /// `sslmode=prefer` or `allow`: they fall back to plaintext silently.
    #[error(
        "sslmode {0:?} can fall back to plaintext and is not supported: use require or verify-full (or disable)"
    )]
    FallbackSslMode(String),
    /// `sslrootcert` was given without TLS.
    #[error("sslrootcert is set but sslmode is disable")]
    RootCertWithoutTls,
    /// A table or schema name that is not a plain lower-case identifier.
    #[error(
        "bad {what} name {name:?}: use 1 to 63 lower-case ASCII letters, digits and '_', not starting with a digit"
    )]
    BadIdentifier {
        /// `table` or `schema`.
        what: &'static str,
        /// The rejected name.
        name: String,
    },
    /// A pool size of zero or too large.
    #[error("bad pool_size {0:?}: expected 1 to 1024")]
    BadPoolSize(String),
}

/// What a request does (the driver kit's one type, with the lost-answer
/// rule: [`Op::lost_answer`]).
pub(crate) use ttl_storage::kit::Op;

/// SQLSTATEs of errors that prove the statement did not take effect and
/// may succeed later.
fn is_retryable(code: &SqlState) -> bool {
    let code = code.code();
    // 08: connection exception; 40: transaction rollback (serialization,
    // deadlock); 53: insufficient resources; 57: operator intervention
    // (query canceled by statement_timeout, admin shutdown, cannot connect
    // now); 25006: read-only transaction (a standby); 55P03: lock not available.
    ["08", "40", "53", "57"]
        .iter()
        .any(|class| code.starts_with(class))
        || code == SqlState::READ_ONLY_SQL_TRANSACTION.code()
        || code == SqlState::LOCK_NOT_AVAILABLE.code()
}

/// Classifies the error of one statement that was sent.
///
/// An error reply from the server means the single-statement transaction
/// was rolled back: never applied, so transient or permanent by SQLSTATE.
/// Without a reply (connection closed, I/O error) a write may have been
/// committed: outcome unknown; a read is transient.
pub(crate) fn classify(err: &tokio_postgres::Error, op: Op) -> ErrorKind {
    if let Some(db) = err.as_db_error() {
        return if is_retryable(db.code()) {
            ErrorKind::Transient
        } else {
            ErrorKind::Permanent
        };
    }
    op.lost_answer()
}

/// Classifies an error of opening a connection: nothing was sent, so
/// nothing is unknown. Unreachable servers are transient; TLS,
/// authentication and configuration failures are permanent, and so are a
/// pooler's refusals of the same kind
/// ([`crate::pooler::classify_pooler_refusal`]).
pub(crate) fn classify_connect(err: &tokio_postgres::Error) -> ErrorKind {
    if crate::pooler::classify_pooler_refusal(err).is_some() {
        return ErrorKind::Permanent;
    }
    if let Some(db) = err.as_db_error() {
        return if is_retryable(db.code()) {
            ErrorKind::Transient
        } else {
            ErrorKind::Permanent
        };
    }
    // tokio-postgres exposes its error kind only through Display.
    let text = err.to_string();
    let permanent = [
        "error performing TLS handshake",
        "authentication error",
        "invalid configuration",
        "invalid connection string",
    ];
    if permanent.iter().any(|p| text.starts_with(p)) {
        ErrorKind::Permanent
    } else {
        ErrorKind::Transient
    }
}

/// Classifies an error of taking a connection from the pool (before any
/// statement is sent).
pub(crate) fn classify_pool(err: &PoolError) -> ErrorKind {
    match err {
        PoolError::Backend(err) => classify_connect(err),
        PoolError::Timeout(_) => ErrorKind::Transient,
        _ => ErrorKind::Permanent,
    }
}

/// A [`StorageError`] of `kind`, keeping the driver's error as the source.
pub(crate) fn storage_error(
    kind: ErrorKind,
    what: &str,
    err: impl std::error::Error + Send + Sync + 'static,
) -> StorageError {
    let detail = match std::error::Error::source(&err) {
        Some(source) => format!("{err}: {source}"),
        None => err.to_string(),
    };
    StorageError::with_source(kind, format!("{what} failed: {detail}"), err)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retryable_sqlstates() {
        for code in [
            SqlState::T_R_SERIALIZATION_FAILURE,
            SqlState::T_R_DEADLOCK_DETECTED,
            SqlState::QUERY_CANCELED,
            SqlState::ADMIN_SHUTDOWN,
            SqlState::CANNOT_CONNECT_NOW,
            SqlState::TOO_MANY_CONNECTIONS,
            SqlState::READ_ONLY_SQL_TRANSACTION,
            SqlState::CONNECTION_FAILURE,
        ] {
            assert!(is_retryable(&code), "{code:?}");
        }
        for code in [
            SqlState::UNDEFINED_TABLE,
            SqlState::INVALID_PASSWORD,
            SqlState::SYNTAX_ERROR,
            SqlState::INSUFFICIENT_PRIVILEGE,
            SqlState::INVALID_CATALOG_NAME,
        ] {
            assert!(!is_retryable(&code), "{code:?}");
        }
    }
}
