//! rustls client settings shared by the Valkey connection and the forwarder.
//!
//! The crypto provider is always *ring*, chosen explicitly: a workspace may
//! build rustls with several providers, and the process-wide default is then
//! ambiguous.

use std::path::Path;
use std::sync::Arc;

use rustls::pki_types::CertificateDer;
use rustls::pki_types::pem::PemObject;
use rustls::{ClientConfig, RootCertStore};

use crate::error::{Error, Result};

fn tls_error(what: &str, err: impl std::fmt::Display) -> Error {
    Error::InvalidConfig(format!("TLS: {what}: {err}"))
}

/// The trust roots: the certificates of `ca_file` (PEM) if given, else the
/// system's roots.
fn roots(ca_file: Option<&Path>) -> Result<RootCertStore> {
    let mut roots = RootCertStore::empty();
    match ca_file {
        Some(path) => {
            let certs = CertificateDer::pem_file_iter(path)
                .map_err(|e| tls_error(&format!("cannot read {}", path.display()), e))?;
            for cert in certs {
                let cert =
                    cert.map_err(|e| tls_error(&format!("bad PEM in {}", path.display()), e))?;
                roots
                    .add(cert)
                    .map_err(|e| tls_error("unusable CA certificate", e))?;
            }
        }
        None => {
            let native = rustls_native_certs::load_native_certs();
            for err in &native.errors {
                tracing::warn!(%err, "could not load a system CA certificate");
            }
            let (added, ignored) = roots.add_parsable_certificates(native.certs);
            tracing::debug!(added, ignored, "loaded system CA certificates");
            if roots.is_empty() {
                tracing::warn!("no system CA certificate: TLS servers cannot be verified");
            }
        }
    }
    if roots.is_empty() && ca_file.is_some() {
        return Err(tls_error("trust roots", "the CA file holds no certificate"));
    }
    Ok(roots)
}

/// A client configuration that verifies servers against `ca_file` (or the
/// system roots), with rustls' safe default protocol versions.
pub(crate) fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig> {
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    Ok(ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| tls_error("protocol versions", e))?
        .with_root_certificates(roots(ca_file)?)
        .with_no_client_auth())
}
