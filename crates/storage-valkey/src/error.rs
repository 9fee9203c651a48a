//! Configuration errors, and how fred's errors map to the contract's
//! [`ErrorKind`]s.

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
    /// A Sentinel URL without Sentinels or service, or with a bad one.
    #[error(
        "bad Sentinel URL: expected redis-sentinel://host[:port][,host[:port]...]/service[/database]"
    )]
    BadSentinel,
    /// `wait_replicas` of 0 or not a number, or a `wait_timeout` not below `timeout`.
    #[error(
        "bad wait_replicas / wait_timeout: at least 1 replica, and a wait_timeout below the request timeout"
    )]
    BadWaitReplicas,
    /// The path is not empty, `/` or `/<database number>`.
    #[error("bad database {0:?}: expected /<number> from 0 to 255")]
    BadDatabase(String),
    /// A user name was given without a password.
    #[error("a user name needs a password (redis://user:password@host)")]
    UserWithoutPassword,
    /// The key prefix is too long or holds control characters.
    #[error("bad key prefix {0:?}: use at most 256 bytes without control characters")]
    BadPrefix(String),
    /// A CA file was given for a plaintext connection.
    #[error("tls_ca_file is set but the connection is not TLS (use rediss://)")]
    CaFileWithoutTls,
}

/// What a request does (the driver kit's one type, with the lost-answer
/// rule: [`Op::lost_answer`]).
pub(crate) use ttl_storage::kit::Op;

/// Server error codes that prove the command was not executed and may
/// succeed later: loading, a busy script, a replica or a failing-over
/// primary, memory pressure, cluster reshuffles.
const RETRYABLE_CODES: &[&str] = &[
    "LOADING",
    "BUSY",
    "MASTERDOWN",
    "READONLY",
    "TRYAGAIN",
    "CLUSTERDOWN",
    "OOM",
    "NOREPLICAS",
    "MOVED",
    "ASK",
    "NOSCRIPT",
];

/// The error code of a server error reply (`WRONGTYPE ...`, `ERR ...`), or
/// `None` for an error raised by the client itself (I/O, timeout, ...).
///
/// fred keeps the server's reply text as the error's details; a server
/// reply starts with an upper-case code, client-side messages never do.
pub(crate) fn server_error_code(err: &fred::error::Error) -> Option<&str> {
    use fred::error::ErrorKind as F;
    match err.kind() {
        F::Unknown | F::InvalidArgument | F::InvalidCommand | F::Auth | F::Cluster | F::Config => {}
        _ => return None,
    }
    let code = err.details().split_whitespace().next()?;
    let is_code = code.len() >= 2 && code.bytes().all(|b| b.is_ascii_uppercase());
    is_code.then_some(code)
}

/// Classifies an error of one operation that was sent to the server.
///
/// - A server error reply proves the command was processed: retryable
///   codes ([`RETRYABLE_CODES`]) are transient, everything else (script
///   errors, `WRONGTYPE`, `NOPERM`, ...) is permanent.
/// - Configuration, authentication and TLS errors are permanent.
/// - Back-pressure (the command was never queued) is transient.
/// - Anything else (timeout, connection lost, canceled) happened after the
///   command may have been written: outcome unknown for a write, transient
///   for a read.
pub(crate) fn classify(err: &fred::error::Error, op: Op) -> ErrorKind {
    known_kind(err).unwrap_or_else(|| match err.kind() {
        fred::error::ErrorKind::Backpressure => ErrorKind::Transient,
        _ => op.lost_answer(),
    })
}

/// What any error says for itself, sent or not: a server error code
/// (retryable or not), or a configuration, authentication, URL, TLS or
/// argument error (permanent). `None`: it depends on what was sent.
fn known_kind(err: &fred::error::Error) -> Option<ErrorKind> {
    use fred::error::ErrorKind as F;
    if let Some(code) = server_error_code(err) {
        return Some(if RETRYABLE_CODES.contains(&code) {
            ErrorKind::Transient
        } else {
            ErrorKind::Permanent
        });
    }
    match err.kind() {
        F::Config | F::Auth | F::Url | F::Tls | F::InvalidArgument | F::InvalidCommand => {
            Some(ErrorKind::Permanent)
        }
        _ => None,
    }
}

/// Classifies an error of the initial connection: nothing was written, so
/// nothing is unknown. A server that cannot be reached (refused, timed
/// out, loading) is transient; bad credentials, TLS failures (certificate
/// not trusted, a plaintext server) and configuration problems are
/// permanent.
pub(crate) fn classify_connect(err: &fred::error::Error) -> ErrorKind {
    if let Some(kind) = known_kind(err) {
        return kind;
    }
    match err.kind() {
        // rustls reports handshake failures (unknown issuer, wrong name, a
        // plaintext server) as I/O errors of kind InvalidData, which fred
        // keeps only as text.
        fred::error::ErrorKind::IO if err.details().contains("InvalidData") => ErrorKind::Permanent,
        _ => ErrorKind::Transient,
    }
}

/// A [`StorageError`] of `kind` for `what`, keeping fred's error as the source.
pub(crate) fn storage_error(kind: ErrorKind, what: &str, err: fred::error::Error) -> StorageError {
    StorageError::with_source(kind, format!("{what} failed: {err}"), err)
}

#[cfg(test)]
mod tests {
    use fred::error::{Error, ErrorKind as F};

    use super::*;

    fn server(reply: &str) -> Error {
        // How fred turns an error reply into an error (kind by first word).
        let kind = match reply.split_whitespace().next() {
            Some("WRONGTYPE") => F::InvalidArgument,
            Some("NOAUTH" | "WRONGPASS") => F::Auth,
            Some("MOVED" | "ASK" | "CLUSTERDOWN") => F::Cluster,
            _ => F::Unknown,
        };
        Error::new(kind, reply.to_string())
    }

    #[test]
    fn server_replies_are_permanent_unless_retryable() {
        let wrongtype = server("WRONGTYPE Operation against a key holding the wrong kind of value");
        assert_eq!(classify(&wrongtype, Op::Write), ErrorKind::Permanent);
        let script = server("ERR user_script:1: Script attempted to access nonexistent global");
        assert_eq!(classify(&script, Op::Write), ErrorKind::Permanent);
        let noperm = server("NOPERM this user has no permissions to run the 'eval' command");
        assert_eq!(classify(&noperm, Op::Read), ErrorKind::Permanent);
        for reply in [
            "LOADING Redis is loading the dataset in memory",
            "BUSY Redis is busy running a script",
            "READONLY You can't write against a read only replica.",
            "OOM command not allowed when used memory > 'maxmemory'.",
            "CLUSTERDOWN The cluster is down",
        ] {
            assert_eq!(classify(&server(reply), Op::Write), ErrorKind::Transient);
        }
    }

    #[test]
    fn lost_answers_are_unknown_for_writes_only() {
        for err in [
            Error::new(F::IO, "Connection closed."),
            Error::new(F::Timeout, "Request timed out."),
            Error::new(F::Canceled, "Canceled."),
            Error::new(F::Unknown, "Too many failed write attempts."),
        ] {
            assert_eq!(
                classify(&err, Op::Write),
                ErrorKind::OutcomeUnknown,
                "{err}"
            );
            assert_eq!(classify(&err, Op::Read), ErrorKind::Transient, "{err}");
        }
        let full = Error::new(F::Backpressure, "queue full");
        assert_eq!(classify(&full, Op::Write), ErrorKind::Transient);
    }

    #[test]
    fn connect_errors() {
        let refused = Error::new(F::IO, "Connection refused (os error 111)");
        assert_eq!(classify_connect(&refused), ErrorKind::Transient);
        let auth = server("WRONGPASS invalid username-password pair or user is disabled.");
        assert_eq!(classify_connect(&auth), ErrorKind::Permanent);
        let tls = Error::new(F::Tls, "received corrupt message");
        assert_eq!(classify_connect(&tls), ErrorKind::Permanent);
        let issuer = Error::new(
            F::IO,
            "Custom { kind: InvalidData, error: InvalidCertificate(UnknownIssuer) }",
        );
        assert_eq!(classify_connect(&issuer), ErrorKind::Permanent);
        let loading = server("LOADING Redis is loading the dataset in memory");
        assert_eq!(classify_connect(&loading), ErrorKind::Transient);
    }
}
