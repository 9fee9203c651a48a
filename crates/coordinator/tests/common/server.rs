//! The Valkey server under test: its settings (the TLS port and test
//! certificates `cargo xtask test-drivers` gives it) and the server
//! commands fred has no method for.

use coordinator::ValkeyClient;
use fred::prelude::*;

/// The TLS port and CA file of the `VALKEY_URL` server: from
/// `VALKEY_TLS_URL` + `VALKEY_TLS_CA` if set, else asked from the server
/// itself (`cargo xtask test-drivers` starts it with a TLS port and a test CA).
pub async fn tls_endpoint(plain: &ValkeyClient) -> (String, std::path::PathBuf) {
    if let (Ok(url), Ok(ca)) = (
        std::env::var("VALKEY_TLS_URL"),
        std::env::var("VALKEY_TLS_CA"),
    ) {
        return (url, ca.into());
    }
    let port = config_get(plain, "tls-port").await;
    let ca = config_get(plain, "tls-ca-cert-file").await;
    assert!(
        !port.is_empty() && port != "0" && !ca.is_empty(),
        "the Valkey server has no TLS port: run `cargo xtask test-drivers --engine valkey` \
         or set VALKEY_TLS_URL and VALKEY_TLS_CA"
    );
    let ca = std::path::PathBuf::from(ca);
    assert!(ca.is_absolute(), "tls-ca-cert-file {ca:?} is not absolute");
    (format!("rediss://127.0.0.1:{port}"), ca)
}

/// The test server certificate and key (for `localhost` / `127.0.0.1`,
/// signed by the test CA of [`tls_endpoint`]): from `VALKEY_TLS_CERT` +
/// `VALKEY_TLS_KEY` if set, else asked from the Valkey server.
pub async fn tls_server_files(plain: &ValkeyClient) -> (std::path::PathBuf, std::path::PathBuf) {
    if let (Ok(cert), Ok(key)) = (
        std::env::var("VALKEY_TLS_CERT"),
        std::env::var("VALKEY_TLS_KEY"),
    ) {
        return (cert.into(), key.into());
    }
    let cert = config_get(plain, "tls-cert-file").await;
    let key = config_get(plain, "tls-key-file").await;
    (cert.into(), key.into())
}

/// Runs a server command (`CONFIG`, `CLIENT`...) that fred has no method
/// for.
pub async fn server_command<R: FromValue>(
    plain: &ValkeyClient,
    command: &'static str,
    args: Vec<&str>,
) -> R {
    plain
        .custom(
            fred::types::CustomCommand::new_static(
                command,
                fred::types::ClusterHash::FirstKey,
                false,
            ),
            args,
        )
        .await
        .unwrap_or_else(|e| panic!("{command}: {e}"))
}

/// A setting of the Valkey server (`CONFIG GET name`), empty if unset.
async fn config_get(plain: &ValkeyClient, name: &str) -> String {
    let reply: Vec<String> = server_command(plain, "CONFIG", vec!["GET", name]).await;
    reply.get(1).cloned().unwrap_or_default()
}
