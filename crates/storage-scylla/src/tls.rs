//! TLS to the nodes (the `tls` feature: rustls with the ring provider).

use scylla::client::session_builder::SessionBuilder;
use ttl_storage::StorageError;

use crate::config::TlsSettings;

/// Adds a rustls client configuration that trusts the CA certificates in
/// `settings.ca_file`.
#[cfg(feature = "tls")]
pub(crate) async fn configure(
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
    let pem = tokio::fs::read(&settings.ca_file)
        .await
        .map_err(|err| permanent("cannot read", err.into()))?;
    for cert in CertificateDer::pem_slice_iter(&pem) {
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
pub(crate) async fn configure(
    _builder: SessionBuilder,
    _settings: &TlsSettings,
) -> Result<SessionBuilder, StorageError> {
    Err(StorageError::permanent(
        "TLS was configured but storage-scylla was built without its `tls` feature",
    ))
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use scylla::client::session_builder::SessionBuilder;
    use ttl_storage::ErrorKind;

    use super::*;

    async fn try_with(ca_file: PathBuf) -> Result<SessionBuilder, StorageError> {
        configure(SessionBuilder::new(), &TlsSettings { ca_file }).await
    }

    #[tokio::test]
    async fn unusable_ca_files_are_permanent_errors() {
        let missing = try_with(PathBuf::from("/nonexistent/ca.pem")).await;
        assert_eq!(missing.err().map(|e| e.kind()), Some(ErrorKind::Permanent));

        let empty =
            std::env::temp_dir().join(format!("storage-scylla-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = try_with(empty.clone()).await.err();
        std::fs::remove_file(&empty).unwrap();
        let err = err.expect("a CA file without certificates must be refused");
        assert_eq!(err.kind(), ErrorKind::Permanent);
        if cfg!(feature = "tls") {
            assert!(err.to_string().contains("no certificate"), "{err}");
        } else {
            assert!(err.to_string().contains("`tls` feature"), "{err}");
        }
    }
}
