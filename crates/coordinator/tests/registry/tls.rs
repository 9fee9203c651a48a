//! `rediss://` against the TLS port of the test server: TLS is used and
//! verified, never replaced by plaintext.

use std::time::Duration;

use coordinator::{Error, ValkeyOptions, connect_with};
use fred::prelude::*;

use crate::common::*;

fn with_ca(ca: &std::path::Path) -> ValkeyOptions {
    ValkeyOptions {
        ca_file: Some(ca.to_owned()),
        ..ValkeyOptions::default()
    }
}

/// Connecting must fail within a few seconds (fred may retry inside `init`).
async fn refused(url: &str, options: &ValkeyOptions) -> bool {
    match tokio::time::timeout(Duration::from_secs(5), connect_with(url, options)).await {
        Ok(Ok(client)) => {
            let _ = client.quit().await;
            false
        }
        Ok(Err(_)) | Err(_) => true,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn rediss_speaks_tls_verified_by_the_configured_ca() {
    let plain = valkey().await;
    let (tls_url, ca) = tls_endpoint(&plain).await;

    // TLS port + test CA: works end to end, the same data as the plain port
    let tls = connect_with(&tls_url, &with_ca(&ca))
        .await
        .expect("TLS connect");
    let key = format!("{}:tls-probe", prefix());
    let _: () = tls.set(&key, "over-tls", None, None, false).await.unwrap();
    let seen: String = plain.get(&key).await.unwrap();
    assert_eq!(seen, "over-tls");

    // a registry over TLS sees a member registered over plaintext
    let p = prefix();
    let mut pod = TestPod::start(&p, "node:pod:3", PodOptions::default()).await;
    let registry = coordinator::Registry::new(
        tls.clone(),
        coordinator::RegistryConfig {
            prefix: p.clone(),
            ..coordinator::RegistryConfig::default()
        },
        std::sync::Arc::new(coordinator::strategy::RoundRobin::new()),
    )
    .unwrap();
    let live = registry.list_live_members().await.unwrap();
    assert_eq!(live.len(), 1);
    assert_eq!(live[0].id.as_str(), "node:pod:3");
    pod.kill().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers`"]
async fn rediss_never_falls_back_to_plaintext_or_an_unverified_server() {
    let plain = valkey().await;
    let (tls_url, ca) = tls_endpoint(&plain).await;
    let plain_url = std::env::var("VALKEY_URL").unwrap();
    let plain_port = plain_url.rsplit(':').next().unwrap().trim_end_matches('/');

    // rediss:// to the plaintext port: the TLS handshake fails, no plaintext retry
    let to_plain_port = format!("rediss://127.0.0.1:{plain_port}");
    assert!(refused(&to_plain_port, &with_ca(&ca)).await);

    // the system roots do not trust the test CA: refused
    assert!(refused(&tls_url, &ValkeyOptions::default()).await);

    // a CA file with a plaintext URL is a configuration mistake
    match connect_with(&plain_url, &with_ca(&ca)).await {
        Err(Error::InvalidConfig(_)) => {}
        other => panic!("expected InvalidConfig, got {:?}", other.map(|_| ())),
    }
}
