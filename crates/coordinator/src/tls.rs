//! rustls client settings shared by the Valkey connection and the forwarder.
//!
//! The crypto provider is always *ring*, chosen explicitly: a workspace may
//! build rustls with several providers, and the process-wide default is then
//! ambiguous.

use std::path::Path;

use rustls::ClientConfig;
use ttl_storage::StorageError;
use ttl_storage::kit::tls::{config_with_roots, roots_from_pem, system_roots};

use crate::error::{Error, Result};

/// A configuration error from the kit's (always permanent) error: its
/// message, which names TLS and the file, and the cause.
fn tls_error(err: StorageError) -> Error {
    use std::error::Error as _;
    let message = match &err {
        StorageError::Permanent { message, .. } => message.clone(),
        other => other.to_string(),
    };
    Error::InvalidConfig(match err.source() {
        Some(cause) => format!("{message}: {cause}"),
        None => message,
    })
}

/// A client configuration that verifies servers against `ca_file` (PEM) or,
/// without one, the system's roots, with rustls' safe default protocol
/// versions. The roots are loaded by the driver kit
/// (`ttl_storage::kit::tls`), the one place the workspace loads them.
/// Unlike a storage driver, an empty system store is only a warning: a
/// coordinator may talk to plaintext pods and Valkey only.
pub(crate) fn client_config(ca_file: Option<&Path>) -> Result<ClientConfig> {
    let roots = match ca_file {
        Some(path) => {
            // read once at start-up, before any call is served
            let pem = std::fs::read(path).map_err(|e| {
                Error::InvalidConfig(format!("TLS CA file {}: cannot read: {e}", path.display()))
            })?;
            roots_from_pem(path, &pem).map_err(tls_error)?
        }
        None => {
            let roots = system_roots();
            if roots.is_empty() {
                tracing::warn!("no system CA certificate: TLS servers cannot be verified");
            }
            roots
        }
    };
    config_with_roots(roots).map_err(tls_error)
}
