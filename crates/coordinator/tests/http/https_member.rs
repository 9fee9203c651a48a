//! A member that advertises an `https://` address (as Node members may) is
//! routed to over TLS, its certificate verified.

use std::sync::Arc;

use axum::Router;
use axum::body::Body;
use axum::http::StatusCode;
use axum::routing::any;
use coordinator::http::ForwardConfig;
use coordinator::{Member, MemberAddress, MemberConfig};
use hyper_util::rt::{TokioExecutor, TokioIo};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use tower_service::Service;

use crate::common::*;

/// Serves `app` over TLS with the test server certificate; returns the port.
async fn tls_pod(app: Router) -> u16 {
    let plain = valkey().await;
    let (cert, key) = tls_server_files(&plain).await;
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(&cert)
        .unwrap()
        .map(|c| c.unwrap())
        .collect();
    let key = PrivateKeyDer::from_pem_file(&key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(
        rustls::crypto::ring::default_provider(),
    ))
    .with_safe_default_protocol_versions()
    .unwrap()
    .with_no_client_auth()
    .with_single_cert(certs, key)
    .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        loop {
            let Ok((tcp, _)) = listener.accept().await else {
                return;
            };
            let (acceptor, app) = (acceptor.clone(), app.clone());
            tokio::spawn(async move {
                let Ok(tls) = acceptor.accept(tcp).await else {
                    return;
                };
                let service = hyper::service::service_fn(
                    move |req: hyper::Request<hyper::body::Incoming>| {
                        let mut app = app.clone();
                        async move { app.call(req.map(Body::new)).await }
                    },
                );
                let _ = hyper_util::server::conn::auto::Builder::new(TokioExecutor::new())
                    .serve_connection(TokioIo::new(tls), service)
                    .await;
            });
        }
    });
    port
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn https_members_are_routed_to_over_verified_tls() {
    let p = prefix();
    let app = Router::new().route("/{*path}", any(|| async { "tls-pod" }));
    let port = tls_pod(app).await;
    let mut config = MemberConfig::new(
        mid("node:https:1"),
        MemberAddress::parse(&format!("https://127.0.0.1:{port}")).unwrap(),
    );
    config.prefix = p.clone();
    let member = Member::new(valkey().await, config).unwrap();
    member.register().await.unwrap();
    member.add_to_destination(&dest("secure")).await.unwrap();
    let (_, ca) = tls_endpoint(&valkey().await).await;

    // the test CA is trusted: forwarded over TLS
    let trusted = TestCoordinator::start(
        &p,
        CoordinatorOptions {
            forward: ForwardConfig {
                tls_ca_file: Some(ca),
                ..ForwardConfig::default()
            },
            ..CoordinatorOptions::default()
        },
    )
    .await;
    let http = Http::new();
    let (status, body) = http
        .send("GET", &format!("{}/destinations/secure/x", trusted.base))
        .await;
    assert_eq!((status, body.as_str()), (StatusCode::OK, "tls-pod"));

    // the system roots do not trust it: the certificate is refused, 502
    let untrusted = TestCoordinator::start(&p, CoordinatorOptions::default()).await;
    let (status, body) = http
        .send("GET", &format!("{}/destinations/secure/x", untrusted.base))
        .await;
    assert_eq!(status, StatusCode::BAD_GATEWAY, "{body}");
    member.deregister().await.unwrap();
}
