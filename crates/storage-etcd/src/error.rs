//! Configuration errors, and how etcd-client's errors map to the
//! contract's [`ErrorKind`]s.

pub(crate) use etcd_client::Error as EtcdError;
use tonic::Code;
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
    /// No endpoint was given.
    #[error("at least one endpoint (host[:port]) is required")]
    NoEndpoint,
    /// An endpoint that is not `host[:port]`.
    #[error("bad endpoint {0:?}: expected host, host:port or [ipv6]:port")]
    BadEndpoint(String),
    /// A user name without a password, or the reverse.
    #[error("credentials need both a user name and a password")]
    BadCredentials,
    /// The key prefix holds control characters or is too long.
    #[error("bad key prefix {0:?}: use at most 256 bytes without control characters")]
    BadPrefix(String),
    /// A CA file was given for a plaintext connection.
    #[error("tls_ca_file is set but the connection is not TLS (use etcds://)")]
    CaFileWithoutTls,
}

/// What a request does (the driver kit's one type, with the lost-answer
/// rule: [`Op::lost_answer`]).
pub(crate) use ttl_storage::kit::Op;

/// Classifies one request's error.
///
/// - gRPC statuses that prove the request was refused before it was
///   proposed (no leader, too many requests, a lease not found) are
///   transient; bad arguments, authentication and permission failures are
///   permanent.
/// - `DeadlineExceeded`, `Unavailable` ("request timed out", connection
///   lost), `Cancelled`, `Unknown`, `Internal`: the proposal may have been
///   committed — outcome unknown for a write, transient for a read.
/// - A transport error (the connection could not be opened) is transient.
pub(crate) fn classify(err: &EtcdError, op: Op) -> ErrorKind {
    let lost = op.lost_answer();
    match err {
        EtcdError::GRpcStatus(status) => classify_status(status.code(), status.message(), lost),
        EtcdError::TransportError(_) | EtcdError::IoError(_) => lost,
        EtcdError::InvalidArgs(_)
        | EtcdError::InvalidUri(_)
        | EtcdError::InvalidHeaderValue(_)
        | EtcdError::Utf8Error(_)
        | EtcdError::EndpointError(_) => ErrorKind::Permanent,
        _ => lost,
    }
}

fn classify_status(code: Code, message: &str, lost: ErrorKind) -> ErrorKind {
    match code {
        Code::InvalidArgument
        | Code::PermissionDenied
        | Code::Unauthenticated
        | Code::Unimplemented
        | Code::OutOfRange
        | Code::AlreadyExists => ErrorKind::Permanent,
        Code::ResourceExhausted | Code::NotFound => ErrorKind::Transient,
        // Refused before proposing: no leader, or this member cannot serve;
        // or never sent: the member's connection could not be opened.
        Code::Unavailable
            if message.contains("no leader")
                || message.contains("not capable")
                || message.contains("tcp connect error") =>
        {
            ErrorKind::Transient
        }
        Code::FailedPrecondition if message.contains("leader") => ErrorKind::Transient,
        Code::FailedPrecondition => ErrorKind::Permanent,
        _ => lost,
    }
}

/// Classifies an error while connecting (nothing written): unreachable is
/// transient, TLS / authentication / configuration failures are permanent.
pub(crate) fn classify_connect(err: &EtcdError) -> ErrorKind {
    match classify(err, Op::Read) {
        ErrorKind::Permanent => ErrorKind::Permanent,
        _ if is_tls_failure(err) => ErrorKind::Permanent,
        _ => ErrorKind::Transient,
    }
}

/// A TLS handshake failure (untrusted certificate, plaintext server):
/// tonic only says so in the error chain's text.
fn is_tls_failure(err: &EtcdError) -> bool {
    let mut source: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = source {
        let text = e.to_string();
        if text.contains("InvalidCertificate")
            || text.contains("invalid peer certificate")
            || text.contains("InvalidContentType")
            || text.contains("corrupt message")
        {
            return true;
        }
        source = e.source();
    }
    false
}

/// A [`StorageError`] of `kind`, keeping the client's error as the source.
pub(crate) fn storage_error(kind: ErrorKind, what: &str, err: EtcdError) -> StorageError {
    let err = Described(err);
    StorageError::with_source(kind, format!("{what} failed: {err}"), err)
}

/// The client's error as [`describe`] says it, its causes those of the
/// gRPC status (not the status again).
#[derive(Debug)]
pub(crate) struct Described(pub(crate) EtcdError);

impl std::fmt::Display for Described {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&describe(&self.0))
    }
}

impl std::error::Error for Described {
    fn source(&self) -> Option<&(dyn std::error::Error + 'static)> {
        match &self.0 {
            EtcdError::GRpcStatus(status) => std::error::Error::source(status),
            other => std::error::Error::source(other),
        }
    }
}

/// The client's error in words: a gRPC status as its code and message,
/// then the transport's causes each once (tonic's `Display` of a status
/// ends in a `Debug` dump of its source, which an operator should not
/// have to read).
pub(crate) fn describe(err: &EtcdError) -> String {
    let EtcdError::GRpcStatus(status) = err else {
        return err.to_string();
    };
    let mut text = format!("{}: {}", status.code().description(), status.message());
    let mut source = std::error::Error::source(status);
    while let Some(cause) = source {
        let said = cause.to_string();
        if !said.is_empty() && !text.contains(&said) {
            text.push_str(": ");
            text.push_str(&said);
        }
        source = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status(code: Code, message: &str) -> EtcdError {
        EtcdError::GRpcStatus(tonic::Status::new(code, message))
    }

    #[test]
    fn a_status_is_said_without_debug_dumps() {
        let said = describe(&status(Code::Unavailable, "tls handshake eof"));
        assert_eq!(
            said,
            "The service is currently unavailable: tls handshake eof"
        );
    }

    #[test]
    fn statuses() {
        let timed_out = status(Code::Unavailable, "etcdserver: request timed out");
        assert_eq!(classify(&timed_out, Op::Write), ErrorKind::OutcomeUnknown);
        assert_eq!(classify(&timed_out, Op::Read), ErrorKind::Transient);
        let no_leader = status(Code::Unavailable, "etcdserver: no leader");
        assert_eq!(classify(&no_leader, Op::Write), ErrorKind::Transient);
        let deadline = status(Code::DeadlineExceeded, "context deadline exceeded");
        assert_eq!(classify(&deadline, Op::Write), ErrorKind::OutcomeUnknown);
        let auth = status(Code::InvalidArgument, "etcdserver: authentication failed");
        assert_eq!(classify(&auth, Op::Write), ErrorKind::Permanent);
        let denied = status(Code::PermissionDenied, "etcdserver: permission denied");
        assert_eq!(classify(&denied, Op::Read), ErrorKind::Permanent);
        let busy = status(Code::ResourceExhausted, "etcdserver: too many requests");
        assert_eq!(classify(&busy, Op::Write), ErrorKind::Transient);
        let lease = status(Code::NotFound, "etcdserver: requested lease not found");
        assert_eq!(classify(&lease, Op::Write), ErrorKind::Transient);
        let unsent = status(Code::Unavailable, "tcp connect error");
        assert_eq!(classify(&unsent, Op::Write), ErrorKind::Transient);
    }
}
