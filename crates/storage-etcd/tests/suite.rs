//! The shared `elections-testsuite`, plus this driver's own cases, against a
//! real etcd named by `ETCD_URL`.
//!
//! Run with `cargo xtask test-drivers --engine etcd`, which starts a local
//! single-member etcd (also serving TLS) and sets `ETCD_URL` and
//! `ETCD_TLS_URL`; or point them at your own cluster (the cases write keys
//! under `ttl/`):
//!
//! ```text
//! ETCD_URL=etcd://127.0.0.1:2379 \
//! ETCD_TLS_URL='etcds://127.0.0.1:2379?tls_ca_file=/path/ca.pem' \
//!     cargo test -p storage-etcd --test suite -- --ignored --test-threads 16
//! ```

// Test code: a panic with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use elections_testsuite::network;
use storage_etcd::EtcdStorage;
use ttl_storage::{DynTtlStorage, ErrorKind, Key, Ttl, TtlStorage};

fn base_url() -> String {
    network::env_url("ETCD_URL", "etcd", "etcd://host:2379")
}

async fn connect_url(url: &str) -> EtcdStorage {
    match EtcdStorage::from_url(url).await {
        Ok(storage) => storage,
        Err(err) => panic!("connecting to {url}: {err:?}"),
    }
}

async fn make_storage() -> DynTtlStorage {
    Arc::new(connect_url(&base_url()).await)
}

elections_testsuite::testsuite!(
    real_time,
    make_storage,
    watch = required,
    ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"
);

async fn make_fence() -> fence::DynFence {
    Arc::new(storage_etcd::fence::EtcdFence::new(
        &connect_url(&base_url()).await,
    ))
}

fence::suite!(
    make_fence,
    ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"
);

fn key(name: &str) -> Key {
    network::unique_key("etcd-driver", name)
}

/// Runs a raw etcd-client request again while it was never sent (the
/// client's balancer picked a member that is down, as in the
/// `etcd-3-degraded` row), as the driver does for its own requests.
async fn unsent_retry<T, F, Fut>(mut request: F) -> T
where
    F: FnMut() -> Fut,
    Fut: std::future::Future<Output = Result<T, etcd_client::Error>>,
{
    for _ in 0..7 {
        match request().await {
            Err(etcd_client::Error::GRpcStatus(status))
                if status.message().contains("tcp connect error") => {}
            other => return other.unwrap(),
        }
    }
    request().await.unwrap()
}

/// Records are keys under the prefix attached to a lease of the TTL;
/// `Ttl::NEVER` writes no lease; a swap moves the key to a fresh lease.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn records_are_prefixed_keys_on_leases() {
    let s = connect_url(&base_url()).await;
    let k = key("lease");
    let raw = s.server_key(&k);
    assert!(raw.starts_with("ttl/"));
    let lease_of = |s: &EtcdStorage| {
        let client = s.client().clone();
        let raw = raw.clone();
        async move {
            let response = unsent_retry(|| {
                let mut client = client.clone();
                let raw = raw.clone();
                async move { client.get(raw, None).await }
            })
            .await;
            response.kvs().first().map(|kv| kv.lease())
        }
    };
    // what the engine says is left: the TTL of the key's lease
    let engine_left = || async {
        let lease = lease_of(&s).await.unwrap_or(0);
        if lease == 0 {
            return None;
        }
        let client = s.client().clone();
        let left = unsent_retry(|| {
            let mut client = client.clone();
            async move { client.lease_time_to_live(lease, None).await }
        })
        .await
        .ttl();
        Some(Duration::from_secs(u64::try_from(left).unwrap_or(0)))
    };
    elections_testsuite::assert_engine_expiry_follows_ttl(
        &s,
        &k,
        engine_left,
        Duration::from_secs(18)..=Duration::from_secs(20),
        Duration::from_millis(2_500),
    )
    .await;
}

/// A member that refuses connections is a transient error at connect time.
#[tokio::test]
async fn refused_connection_is_transient() {
    network::refused_connection_is_transient(|port| async move {
        EtcdStorage::from_url(&format!("etcd://127.0.0.1:{port}?connect_timeout=1s")).await
    })
    .await;
}

fn tls_url() -> String {
    std::env::var("ETCD_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "ETCD_TLS_URL is not set: `cargo xtask test-drivers --engine etcd` sets it; with your \
             own cluster set ETCD_TLS_URL=etcds://host:2379?tls_ca_file=/path/ca.pem"
        )
    })
}

/// Over `etcds://` with the member's CA every operation works; with another
/// CA the connection is refused (the certificate is checked).
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn tls_round_trip_and_certificate_check() {
    let s = connect_url(&tls_url()).await;
    assert!(s.config().tls());
    let mut wrong = url::Url::parse(&tls_url()).unwrap();
    wrong.set_query(Some(&format!(
        "tls_ca_file={}/tests/data/ca.pem&connect_timeout=2s",
        env!("CARGO_MANIFEST_DIR")
    )));
    let wrong_ca = EtcdStorage::from_url(wrong.as_str());
    network::tls_round_trip_and_certificate_check(&s, &key("tls"), wrong_ca).await;
}

/// `etcds://` to a plaintext member fails; it never falls back to plaintext.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn etcds_to_plaintext_member_fails() {
    let mut url = url::Url::parse(&base_url()).unwrap();
    url.set_scheme("etcds").unwrap();
    url.set_query(Some(&format!(
        "tls_ca_file={}/tests/data/ca.pem&connect_timeout=2s",
        env!("CARGO_MANIFEST_DIR")
    )));
    // Said plainly (HTTP/2's preface in plaintext is answered), once, and
    // without the transport's debug dump.
    let said = network::tls_to_a_plaintext_server_fails_plainly(
        EtcdStorage::from_url(url.as_str()),
        Duration::from_secs(15),
    )
    .await;
    assert!(!said.contains("tonic::"), "{said}");
}

/// A wrong password is a permanent error that says the member's reason
/// once and never shows the password; the right one logs in (the member
/// does check passwords). Needs a member with authentication on:
/// `cargo xtask test-drivers --engine etcd` starts one (`ETCD_AUTH_URL`).
#[tokio::test]
#[ignore = "needs etcd with authentication on: run `cargo xtask test-drivers --engine etcd`"]
async fn wrong_password_is_permanent() {
    let right = std::env::var("ETCD_AUTH_URL").unwrap_or_else(|_| {
        panic!(
            "ETCD_AUTH_URL is not set: `cargo xtask test-drivers --engine etcd` sets it; with your \
             own member set ETCD_AUTH_URL=etcd://user:password@host:2379"
        )
    });
    let s = connect_url(&right).await;
    let k = key("auth");
    assert!(
        s.insert_if_not_exists(&k, b"v", Ttl::from_secs(30).unwrap())
            .await
            .unwrap()
    );
    let mut wrong = url::Url::parse(&right).unwrap();
    wrong.set_password(Some("hunter2")).unwrap();
    let Err(err) = tokio::time::timeout(
        Duration::from_secs(30),
        EtcdStorage::from_url(wrong.as_str()),
    )
    .await
    .expect("a wrong password is answered, not waited out") else {
        panic!("logged in with a wrong password");
    };
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
    let said = err.to_string();
    assert!(said.contains("connecting to"), "{said}");
    assert_eq!(said.matches("authentication failed").count(), 1, "{said}");
}

fn server_addr() -> SocketAddr {
    network::server_addr(&base_url(), 2379)
}

/// A write whose answer is lost is outcome unknown (and here it was in
/// fact applied); a read in the same situation is transient; once the
/// member cannot be reached, operations are not unknown.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn lost_answers_and_lost_connections() {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = format!("etcd://{}?timeout=1s&connect_timeout=1s", proxy.addr);
    let s = connect_url(&url).await;
    let k = key("lost");
    // Ttl::NEVER: no lease grant, so the swallowed request is the
    // transaction itself (a lost grant is rightly transient).
    assert!(s.insert_if_not_exists(&k, b"a", Ttl::NEVER).await.unwrap());
    network::lost_answer_of_a_write_is_outcome_unknown(&s, &direct, &proxy, &k, Ttl::NEVER, true)
        .await;

    proxy.shut_down();
    tokio::time::sleep(Duration::from_millis(200)).await;
    let err = s.get(&k).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(direct.compare_and_delete(&k, b"b").await.unwrap());
}

/// `EtcdFence::set` guards a key of the caller's (not the register of
/// `fence::Fence::write`): it refuses tokens lower than the highest seen
/// (exactly, beyond 2^53 and up to `u64::MAX`), a refused write leaves the
/// key unchanged, and racing writers leave the highest token's value. The
/// shared `fence_suite` covers the rest of the contract.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn fence_set_guards_the_callers_key() {
    use storage_etcd::fence::{EtcdFence, FenceOutcome};
    let s = connect_url(&base_url()).await;
    let fence = EtcdFence::new(&s);
    let resource = key("fence").to_string();
    let data = format!("suite-fenced/{resource}");
    let read = |data: String| {
        let client = s.client().clone();
        async move {
            let response = unsent_retry(|| {
                let mut client = client.clone();
                let data = data.clone();
                async move { client.get(data, None).await }
            })
            .await;
            response.kvs().first().map(|kv| kv.value().to_vec())
        }
    };
    let set = {
        let fence = fence.clone();
        move |resource: String, token: u64, key: String, value: Vec<u8>| {
            let fence = fence.clone();
            async move { fence.set(&resource, token, &key, &value).await }
        }
    };
    fence::suite::guarded_key_case(&resource, &data, set, read).await;
    // exact beyond 2^53, up to the last token
    assert_eq!(
        fence.set(&resource, u64::MAX, &data, b"max").await.unwrap(),
        FenceOutcome::Accepted
    );
    assert_eq!(read(data.clone()).await.as_deref(), Some(&b"max"[..]));
}

/// Issue 34, case 7: a renewal applied late never moves the expiry earlier.
/// The late renewal's lease is granted before the proxy holds its
/// transaction (one answer let through), as when two transactions of one
/// client are reordered on the way; see the shared case for the rest.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = connect_url(&base_url()).await;
    network::renewal_applied_late_never_moves_the_expiry_earlier(
        server_addr(),
        &direct,
        |proxy| async move { connect_url(&format!("etcd://{proxy}?timeout=20s")).await },
        &key("late-renewal"),
        1,
    )
    .await;
}
