//! TLS for network drivers (cargo feature `kit-tls`): the trust roots and
//! the rustls client configuration, loaded in this one place.
//!
//! Built with the ring provider explicitly, rather than rustls'
//! process-wide default, which panics when a binary links two providers.

use std::{path::Path, sync::Arc};

use rustls::{
    RootCertStore,
    pki_types::{CertificateDer, pem::PemObject},
};

use crate::{BoxError, ErrorKind, StorageError};

/// A rustls client configuration that trusts the certificates of
/// `ca_file`, or the system's trust store when there is none. Every failure
/// is permanent: nothing here gets better by retrying. `ca_option` names the
/// driver's URL option for a CA file (`tls_ca_file`, `sslrootcert`), for the
/// message when the system has no CA certificates.
///
/// # Errors
///
/// A [`ErrorKind::Permanent`] [`StorageError`] naming the file and why
/// (unreadable, bad PEM, no certificate), or saying that the system has no
/// CA certificates.
///
/// ```
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() {
/// use std::path::Path;
/// use ttl_storage::{ErrorKind, kit::tls::client_config};
///
/// let err = client_config(Some(Path::new("/nonexistent/ca.pem")), "tls_ca_file")
///     .await
///     .unwrap_err();
/// assert_eq!(err.kind(), ErrorKind::Permanent);
/// # }
/// ```
pub async fn client_config(
    ca_file: Option<&Path>,
    ca_option: &str,
) -> Result<rustls::ClientConfig, StorageError> {
    let roots = match ca_file {
        Some(path) => {
            let pem = tokio::fs::read(path)
                .await
                .map_err(|err| ca_file_error(path, "cannot read", err.into()))?;
            roots_from_pem(path, &pem)?
        }
        None => {
            let roots = system_roots();
            if roots.is_empty() {
                return Err(StorageError::permanent(format!(
                    "no system CA certificates found: pass {ca_option}=/path/to/ca.pem"
                )));
            }
            roots
        }
    };
    config_with_roots(roots)
}

/// A rustls client configuration that trusts `roots`: rustls' safe default
/// protocol versions, the *ring* provider, no client certificate.
///
/// # Errors
///
/// A [`ErrorKind::Permanent`] [`StorageError`] when no protocol version is
/// usable with the provider.
pub fn config_with_roots(roots: RootCertStore) -> Result<rustls::ClientConfig, StorageError> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| {
            StorageError::with_source(ErrorKind::Permanent, "no usable TLS version", err)
        })?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(config)
}

fn ca_file_error(path: &Path, what: &str, err: BoxError) -> StorageError {
    StorageError::with_source(
        ErrorKind::Permanent,
        format!("TLS CA file {}: {what}", path.display()),
        err,
    )
}

/// The certificates of the PEM text `pem`, read from `path` (named in the
/// errors); at least one.
///
/// # Errors
///
/// A [`ErrorKind::Permanent`] [`StorageError`]: bad PEM, an unusable
/// certificate, or no certificate at all.
pub fn roots_from_pem(path: &Path, pem: &[u8]) -> Result<RootCertStore, StorageError> {
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(pem) {
        let cert = cert.map_err(|err| ca_file_error(path, "bad PEM", err.into()))?;
        roots
            .add(cert)
            .map_err(|err| ca_file_error(path, "bad certificate", err.into()))?;
    }
    if roots.is_empty() {
        return Err(StorageError::permanent(format!(
            "TLS CA file {} holds no certificate",
            path.display()
        )));
    }
    Ok(roots)
}

/// The system's trust store, possibly empty (the caller decides whether
/// that is an error); certificates that cannot be loaded or parsed are
/// skipped with a warning.
pub fn system_roots() -> RootCertStore {
    let found = rustls_native_certs::load_native_certs();
    for err in &found.errors {
        tracing::warn!(%err, "could not load some system CA certificates");
    }
    let mut roots = RootCertStore::empty();
    let (added, ignored) = roots.add_parsable_certificates(found.certs);
    tracing::debug!(added, ignored, "loaded system CA certificates");
    roots
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::expect_used)]

    use std::path::PathBuf;

    use super::*;

    #[tokio::test]
    async fn unusable_ca_files_are_permanent_errors() {
        let missing = PathBuf::from("/nonexistent/ca.pem");
        let err = client_config(Some(&missing), "tls_ca_file").await.err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Permanent));

        let empty =
            std::env::temp_dir().join(format!("ttl-storage-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = client_config(Some(&empty), "tls_ca_file").await.err();
        std::fs::remove_file(&empty).unwrap();
        let err = err.expect("a CA file without certificates must be refused");
        assert_eq!(err.kind(), ErrorKind::Permanent);
        assert!(err.to_string().contains("no certificate"), "{err}");
    }
}

/// Whether the server at `host:port` answered `greeting`, sent in
/// plaintext, with something that is not TLS: after a TLS handshake to it
/// failed, this tells "the server does not speak TLS" (a `rediss://` or
/// `etcds://` URL at a plaintext port) from other failures, so the driver
/// can say so instead of "timed out" or "handshake eof".
///
/// Only the protocol's own greeting is sent (for example `PING\r\n`, or
/// HTTP/2's connection preface), never credentials or data, and nothing
/// of the answer is used beyond its first byte; the connection is then
/// closed: a diagnosis, never a fallback to plaintext. `false` when it
/// cannot tell (no connection, no answer within `limit`, or a TLS record
/// in reply: content types 20 to 23, alerts and handshakes included).
pub async fn answers_in_plaintext(
    host: &str,
    port: u16,
    greeting: &[u8],
    limit: std::time::Duration,
) -> bool {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let probe = async {
        let mut stream = tokio::net::TcpStream::connect((host, port)).await.ok()?;
        stream.write_all(greeting).await.ok()?;
        let mut first = [0_u8; 1];
        let read = stream.read(&mut first).await.ok()?;
        (read == 1).then_some(first[0])
    };
    match tokio::time::timeout(limit, probe).await {
        Ok(Some(byte)) => !(20..=23).contains(&byte),
        _ => false,
    }
}

#[cfg(test)]
mod probe_tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    use super::answers_in_plaintext;

    async fn server(reply: &'static [u8]) -> u16 {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let port = listener.local_addr().unwrap().port();
        tokio::spawn(async move {
            let (mut socket, _) = listener.accept().await.unwrap();
            let mut buf = [0_u8; 64];
            let _ = socket.read(&mut buf).await;
            let _ = socket.write_all(reply).await;
        });
        port
    }

    #[tokio::test]
    async fn a_plaintext_answer_is_told_from_a_tls_alert_and_silence() {
        let limit = Duration::from_secs(2);
        let plain = server(b"+PONG\r\n").await;
        assert!(answers_in_plaintext("127.0.0.1", plain, b"PING\r\n", limit).await);
        // A TLS server answers garbage with an alert record (content type 21).
        let tls = server(&[21, 3, 3, 0, 2, 2, 50]).await;
        assert!(!answers_in_plaintext("127.0.0.1", tls, b"PING\r\n", limit).await);
        let silent = server(b"").await;
        assert!(!answers_in_plaintext("127.0.0.1", silent, b"PING\r\n", limit).await);
    }
}
