//! TLS to the nodes (the `tls` feature: rustls with the ring provider).

use scylla::client::session_builder::SessionBuilder;
use ttl_storage::StorageError;

use crate::config::TlsSettings;

/// Adds a rustls client configuration that trusts the CA certificates in
/// `settings.ca_file`.
#[cfg(feature = "tls")]
pub(crate) fn configure(
    builder: SessionBuilder,
    settings: &TlsSettings,
) -> Result<SessionBuilder, StorageError> {
    use std::sync::Arc;

    use rustls::pki_types::{CertificateDer, pem::PemObject};
    use ttl_storage::ErrorKind;

    let path = settings.ca_file.display().to_string();
    let permanent = |what: &str, err: Box<dyn std::error::Error + Send + Sync>| {
        StorageError::with_source(
            ErrorKind::Permanent,
            format!("TLS CA file {path}: {what}"),
            err,
        )
    };
    let mut roots = rustls::RootCertStore::empty();
    let certs = CertificateDer::pem_file_iter(&settings.ca_file)
        .map_err(|err| permanent("cannot read", err.into()))?;
    for cert in certs {
        let cert = cert.map_err(|err| permanent("bad PEM", err.into()))?;
        roots
            .add(cert)
            .map_err(|err| permanent("bad certificate", err.into()))?;
    }
    if roots.is_empty() {
        return Err(StorageError::permanent(format!(
            "TLS CA file {path} holds no certificate"
        )));
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|err| permanent("no usable TLS version", err.into()))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(builder.tls_context(Some(Arc::new(config))))
}

/// Without the `tls` feature, asking for TLS is a configuration error.
#[cfg(not(feature = "tls"))]
pub(crate) fn configure(
    _builder: SessionBuilder,
    _settings: &TlsSettings,
) -> Result<SessionBuilder, StorageError> {
    Err(StorageError::permanent(
        "TLS was configured but storage-scylla was built without its `tls` feature",
    ))
}
