//! The rustls client configuration of a `rediss://` connection.
//!
//! Built here, with the ring provider, rather than by fred's default
//! (which uses rustls' process-wide provider and panics when a binary links
//! two providers).

use std::sync::Arc;

use rustls::{
    RootCertStore,
    pki_types::{CertificateDer, pem::PemObject},
};
use ttl_storage::{ErrorKind, StorageError};

use crate::config::TlsSettings;

/// A rustls client configuration that trusts the CA file of `settings`, or
/// the system's trust store when there is none. Every failure is permanent:
/// nothing here gets better by retrying.
pub(crate) async fn client_config(
    settings: &TlsSettings,
) -> Result<rustls::ClientConfig, StorageError> {
    let roots = match &settings.ca_file {
        Some(path) => roots_from_file(path).await?,
        None => system_roots()?,
    };
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

async fn roots_from_file(path: &std::path::Path) -> Result<RootCertStore, StorageError> {
    let shown = path.display().to_string();
    let permanent = |what: &str, err: Box<dyn std::error::Error + Send + Sync>| {
        StorageError::with_source(
            ErrorKind::Permanent,
            format!("TLS CA file {shown}: {what}"),
            err,
        )
    };
    let pem = tokio::fs::read(path)
        .await
        .map_err(|err| permanent("cannot read", err.into()))?;
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        let cert = cert.map_err(|err| permanent("bad PEM", err.into()))?;
        roots
            .add(cert)
            .map_err(|err| permanent("bad certificate", err.into()))?;
    }
    if roots.is_empty() {
        return Err(StorageError::permanent(format!(
            "TLS CA file {shown} holds no certificate"
        )));
    }
    Ok(roots)
}

fn system_roots() -> Result<RootCertStore, StorageError> {
    let found = rustls_native_certs::load_native_certs();
    for err in &found.errors {
        tracing::warn!(%err, "could not load some system CA certificates");
    }
    let mut roots = RootCertStore::empty();
    let (added, _ignored) = roots.add_parsable_certificates(found.certs);
    if added == 0 {
        return Err(StorageError::permanent(
            "no system CA certificates found: pass tls_ca_file=/path/to/ca.pem",
        ));
    }
    Ok(roots)
}

#[cfg(test)]
mod tests {
    use std::path::PathBuf;

    use super::*;

    #[tokio::test]
    async fn unusable_ca_files_are_permanent_errors() {
        let missing = TlsSettings {
            ca_file: Some(PathBuf::from("/nonexistent/ca.pem")),
        };
        let err = client_config(&missing).await.err();
        assert_eq!(err.map(|e| e.kind()), Some(ErrorKind::Permanent));

        let empty =
            std::env::temp_dir().join(format!("storage-valkey-empty-{}.pem", std::process::id()));
        std::fs::write(&empty, "no certificate here\n").unwrap();
        let err = client_config(&TlsSettings {
            ca_file: Some(empty.clone()),
        })
        .await
        .err();
        std::fs::remove_file(&empty).unwrap();
        let err = err.expect("a CA file without certificates must be refused");
        assert_eq!(err.kind(), ErrorKind::Permanent);
        assert!(err.to_string().contains("no certificate"), "{err}");
    }
}
