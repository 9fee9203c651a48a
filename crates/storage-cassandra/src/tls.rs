//! TLS to the nodes (the `tls` feature: rustls with the ring provider; the
//! trust roots are loaded by the driver kit, `ttl_storage::kit::tls`).

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
    let config =
        ttl_storage::kit::tls::client_config(Some(&settings.ca_file), "tls_ca_file").await?;
    Ok(builder.tls_context(Some(std::sync::Arc::new(config))))
}

/// Without the `tls` feature, asking for TLS is a configuration error.
#[cfg(not(feature = "tls"))]
pub(crate) async fn configure(
    _builder: SessionBuilder,
    _settings: &TlsSettings,
) -> Result<SessionBuilder, StorageError> {
    Err(StorageError::permanent(
        "TLS was configured but storage-cassandra was built without its `tls` feature",
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

        let empty = std::env::temp_dir().join(format!(
            "storage-cassandra-empty-{}.pem",
            std::process::id()
        ));
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
