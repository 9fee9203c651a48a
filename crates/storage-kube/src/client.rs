//! The Kubernetes client a [`crate::KubeConfig`] names.

use kube::config::{KubeConfigOptions, Kubeconfig};
use ttl_storage::{ErrorKind, Result, StorageError};

use crate::{KubeConfig, config::Source};

/// A client for the configured API server: TLS only, kube's own retries
/// off (a retried write that had been applied would meet its own version
/// and be reported as lost to another writer), the configured connect
/// timeout (requests are timed by the storage itself).
pub(crate) async fn client(config: &KubeConfig) -> Result<kube::Client> {
    let permanent = |what: &str, err: Box<dyn std::error::Error + Send + Sync>| {
        StorageError::with_source(ErrorKind::Permanent, what.to_owned(), err)
    };
    let mut kube_config = match &config.source {
        Source::Infer => kube::Config::infer()
            .await
            .map_err(|err| permanent("no kubeconfig and no pod service account", err.into()))?,
        Source::InCluster => kube::Config::incluster()
            .map_err(|err| permanent("not in a pod with a service account", err.into()))?,
        Source::Kubeconfig { path, context } => {
            let options = KubeConfigOptions {
                context: context.clone(),
                ..KubeConfigOptions::default()
            };
            let loaded = match path {
                Some(path) => {
                    let file = Kubeconfig::read_from(path).map_err(|err| {
                        permanent(
                            &format!("reading kubeconfig {}", path.display()),
                            err.into(),
                        )
                    })?;
                    kube::Config::from_custom_kubeconfig(file, &options).await
                }
                None => kube::Config::from_kubeconfig(&options).await,
            };
            loaded.map_err(|err| permanent("loading the kubeconfig", err.into()))?
        }
        Source::Server {
            url,
            ca_file,
            token_file,
        } => {
            let uri = url
                .parse()
                .map_err(|err: http::uri::InvalidUri| permanent("bad server URL", err.into()))?;
            let mut server = kube::Config::new(uri);
            server.root_cert_file = ca_file.clone();
            if let Some(path) = ca_file {
                server.root_cert = Some(der_certificates(path)?);
            }
            server.auth_info.token_file = token_file.as_ref().map(|p| p.display().to_string());
            server
        }
    };
    install_ring_provider();
    if kube_config.cluster_url.scheme_str() != Some("https") {
        return Err(StorageError::permanent(format!(
            "the API server {} is not https: this driver talks to it over TLS only",
            kube_config.cluster_url
        )));
    }
    kube_config.default_namespace = config.namespace.clone();
    kube_config.default_retry = false;
    kube_config.connect_timeout = Some(config.connect_timeout());
    kube_config.write_timeout = Some(config.request_timeout());
    kube_config.read_timeout = None;
    build(&kube_config).map_err(|err| {
        StorageError::with_source(ErrorKind::Permanent, "building the Kubernetes client", err)
    })
}

/// kube's client stack, with one change: `TCP_NODELAY`. kube's own
/// connector leaves Nagle's algorithm on, and a request written right
/// after the TLS handshake's last message then waits for the server's
/// delayed ACK: 40 ms on every new connection (measured with strace: the
/// first answer 42 ms after the request, the next one on the same
/// connection 1 ms), and every Lease watch takes a connection of its own.
/// The layers are kube's (`ConfigExt`): the base URI, the credentials
/// (a token file re-read as it rotates), the configured headers.
fn build(config: &kube::Config) -> std::result::Result<kube::Client, kube::Error> {
    use hyper_util::{client::legacy::connect::HttpConnector, rt::TokioExecutor};
    use kube::client::{Body, ConfigExt};
    use tower::{BoxError, ServiceBuilder};

    let mut http = HttpConnector::new();
    http.enforce_http(false);
    http.set_nodelay(true);
    http.set_connect_timeout(config.connect_timeout);
    let https = config.rustls_https_connector_with_connector(http)?;
    let client: hyper_util::client::legacy::Client<_, Body> =
        hyper_util::client::legacy::Client::builder(TokioExecutor::new()).build(https);
    let service = ServiceBuilder::new()
        .layer(config.base_uri_layer())
        .option_layer(config.auth_layer()?)
        .layer(config.extra_headers_layer()?)
        .map_err(BoxError::from)
        .service(client);
    Ok(kube::Client::new(service, config.default_namespace.clone()))
}

/// The DER certificates of a PEM file.
fn der_certificates(path: &std::path::Path) -> Result<Vec<Vec<u8>>> {
    use base64::{Engine, engine::general_purpose::STANDARD};
    let text = std::fs::read_to_string(path).map_err(|err| {
        StorageError::with_source(
            ErrorKind::Permanent,
            format!("reading the CA file {}", path.display()),
            err,
        )
    })?;
    let mut certificates = Vec::new();
    let mut body: Option<String> = None;
    for line in text.lines().map(str::trim) {
        match (line, &mut body) {
            ("-----BEGIN CERTIFICATE-----", None) => body = Some(String::new()),
            ("-----END CERTIFICATE-----", Some(b64)) => {
                let der = STANDARD.decode(b64.as_bytes()).map_err(|err| {
                    StorageError::with_source(
                        ErrorKind::Permanent,
                        format!("the CA file {} is not PEM", path.display()),
                        err,
                    )
                })?;
                certificates.push(der);
                body = None;
            }
            (line, Some(b64)) => b64.push_str(line),
            _ => {}
        }
    }
    if certificates.is_empty() {
        return Err(StorageError::permanent(format!(
            "the CA file {} holds no PEM certificate",
            path.display()
        )));
    }
    Ok(certificates)
}

/// kube builds its rustls configuration from the process's default
/// crypto provider, and rustls has none when a program links two
/// providers (the AWS SDK brings aws-lc-rs; every driver here uses
/// *ring*): kube would panic at the first connection. Installs *ring*, the
/// provider of every other driver, as the process default unless the
/// program chose one already.
fn install_ring_provider() {
    if rustls::crypto::CryptoProvider::get_default().is_none() {
        // Losing the race to another installer is fine: a default is set.
        let _ = rustls::crypto::ring::default_provider().install_default();
    }
}
