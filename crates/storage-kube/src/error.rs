//! How the API server's answers and the client's failures map to the
//! contract's [`ErrorKind`]s.

use std::error::Error as _;

use ttl_storage::{ErrorKind, StorageError, kit::Op};

/// What a failed request means.
///
/// - `409` (a stale `resourceVersion`, or a name already taken) and `404`
///   are answers the operations handle themselves, not errors.
/// - `429` (the API server's priority and fairness turned the request
///   away before it ran) is transient.
/// - `5xx`: the API server may have applied the write before it failed or
///   gave up (`504` "the request did not complete within the allowed
///   time" is sent while the write can still land), so a write's outcome
///   is unknown; a read's is transient.
/// - `401`, `403`, `400`, `422` and other refusals are permanent: retrying
///   cannot help (a wrong token, a role without the `leases` verbs).
/// - No answer: if the connection could not be opened (refused, DNS, the
///   TLS handshake), nothing was sent: transient. Otherwise the answer was
///   lost after the request was sent: outcome unknown for a write.
pub(crate) fn classify(err: &kube::Error, op: Op) -> ErrorKind {
    match err {
        kube::Error::Api(status) => classify_status(status.code, op),
        kube::Error::Auth(_) | kube::Error::BuildRequest(_) | kube::Error::HttpError(_) => {
            ErrorKind::Permanent
        }
        kube::Error::TlsRequired | kube::Error::ProxyProtocolUnsupported { .. } => {
            ErrorKind::Permanent
        }
        other if tls_failure(other).is_some() || in_chain::<kube::client::AuthError>(other) => {
            ErrorKind::Permanent
        }
        other if never_sent(other) => ErrorKind::Transient,
        _ => op.lost_answer(),
    }
}

/// The kind of an answer with HTTP status `code`.
pub(crate) fn classify_status(code: u16, op: Op) -> ErrorKind {
    match code {
        429 => ErrorKind::Transient,
        500..=599 => op.lost_answer(),
        _ => ErrorKind::Permanent,
    }
}

/// The TLS failure in `err`'s chain, if the handshake failed: a
/// certificate that is not trusted, or a server that does not speak TLS.
/// Both are configuration mistakes (permanent), and nothing was sent.
pub(crate) fn tls_failure(err: &kube::Error) -> Option<&rustls::Error> {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(err) = next {
        if let Some(tls) = err.downcast_ref::<rustls::Error>() {
            return Some(tls);
        }
        // `io::Error::source` skips the error it wraps (itself often an
        // `io::Error` around rustls's): look inside instead.
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && let Some(inner) = io.get_ref()
        {
            next = Some(inner as &(dyn std::error::Error + 'static));
            continue;
        }
        next = err.source();
    }
    None
}

/// True when `err`'s chain holds an `E` (credentials that cannot be
/// used: a token file that cannot be read or is not a header value).
fn in_chain<E: std::error::Error + 'static>(err: &kube::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(err) = next {
        if err.is::<E>() {
            return true;
        }
        next = err.source();
    }
    false
}

/// True when the connection was never opened, so the request was not sent.
fn never_sent(err: &kube::Error) -> bool {
    let mut next: Option<&(dyn std::error::Error + 'static)> = err.source();
    while let Some(err) = next {
        if let Some(client) = err.downcast_ref::<hyper_util::client::legacy::Error>()
            && client.is_connect()
        {
            return true;
        }
        if let Some(io) = err.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::AddrNotAvailable
            )
        {
            return true;
        }
        next = err.source();
    }
    false
}

/// A [`StorageError`] for `err`, raised by `what` (`"PUT Lease x"`).
pub(crate) fn storage_error(err: kube::Error, op: Op, what: &str) -> StorageError {
    let kind = classify(&err, op);
    let said = match (&err, tls_failure(&err)) {
        (kube::Error::Api(status), _) => format!(
            "{what}: the API server answered {} {}: {}",
            status.code, status.reason, status.message
        ),
        (_, Some(rustls::Error::InvalidMessage(_))) => {
            format!("{what}: the server does not speak TLS (is it a plaintext port?)")
        }
        (_, Some(tls)) => format!("{what}: TLS handshake failed: {tls}"),
        _ => format!("{what}: {err}"),
    };
    StorageError::with_source(kind, said, SaidOnce(err.to_string()))
}

/// The client's error as text, kept as the cause without repeating its
/// own chain of causes in every report.
#[derive(Debug)]
struct SaidOnce(String);

impl std::fmt::Display for SaidOnce {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

impl std::error::Error for SaidOnce {}

/// A request that did not answer within the request timeout.
pub(crate) fn timed_out(op: Op, what: &str, timeout: std::time::Duration) -> StorageError {
    let kind = op.lost_answer();
    let message = format!("{what}: no answer within {timeout:?}");
    match kind {
        ErrorKind::OutcomeUnknown => StorageError::outcome_unknown(message),
        _ => StorageError::transient(message),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statuses() {
        assert_eq!(classify_status(429, Op::Write), ErrorKind::Transient);
        assert_eq!(classify_status(504, Op::Write), ErrorKind::OutcomeUnknown);
        assert_eq!(classify_status(500, Op::Read), ErrorKind::Transient);
        assert_eq!(classify_status(401, Op::Write), ErrorKind::Permanent);
        assert_eq!(classify_status(403, Op::Read), ErrorKind::Permanent);
        assert_eq!(classify_status(422, Op::Write), ErrorKind::Permanent);
    }
}
