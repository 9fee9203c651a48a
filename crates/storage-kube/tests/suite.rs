//! The shared `elections-testsuite` and fence suite, the network cases and
//! this driver's own (client-go interoperation, names that meet), against
//! a real kube-apiserver named by `KUBE_URL`.
//!
//! Run with `cargo xtask test-drivers --engine kube`, which builds (once)
//! and starts kube-apiserver on a throwaway etcd and sets `KUBE_URL`
//! (`kube://default?server=https://127.0.0.1:PORT&ca_file=...&token_file=...`),
//! `KUBE_SERVER`, `KUBE_CA_FILE` and `KUBE_TOKEN_FILE`; or point them at your
//! own cluster (the cases create and delete Leases in the namespace).

// Test code: a panic with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{net::SocketAddr, sync::Arc, time::Duration};

use elections_testsuite::network;
use k8s_openapi::{
    api::coordination::v1::{Lease, LeaseSpec},
    apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta},
    jiff::Timestamp,
};
use kube::api::{Api, PostParams};
use storage_kube::KubeStorage;
use ttl_storage::{DynTtlStorage, ErrorKind, Key, Ttl, TtlStorage};

fn base_url() -> String {
    network::env_url(
        "KUBE_URL",
        "kube",
        "kube://default?server=https://host:6443&ca_file=ca.pem&token_file=token",
    )
}

fn env(var: &str) -> String {
    std::env::var(var).unwrap_or_else(|_| {
        panic!("{var} is not set: `cargo xtask test-drivers --engine kube` sets it")
    })
}

async fn connect_url(url: &str) -> KubeStorage {
    match KubeStorage::from_url(url).await {
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
    ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"
);

async fn make_fence() -> fence::DynFence {
    Arc::new(storage_kube::fence::KubeFence::new(
        &connect_url(&base_url()).await,
    ))
}

fence::suite!(
    make_fence,
    ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"
);

fn key(name: &str) -> Key {
    network::unique_key("kube-driver", name)
}

/// A Lease name of this run (a valid name: the key is the name).
fn lease_key(name: &str) -> Key {
    let unique = network::unique(name, "-")
        .to_ascii_lowercase()
        .replace(['_', '/', ':'], "-");
    Key::new(unique).unwrap()
}

fn server_addr() -> SocketAddr {
    network::server_addr(&env("KUBE_SERVER"), 443)
}

/// `KUBE_URL` with its server replaced by `addr` and `extra` parameters.
fn url_via(addr: SocketAddr, extra: &str) -> String {
    let base = base_url().replace(&env("KUBE_SERVER"), &format!("https://{addr}"));
    format!("{base}{extra}")
}

/// The raw Lease API of the run's namespace, as any client sees it.
async fn leases(storage: &KubeStorage) -> Api<Lease> {
    let _ = storage;
    Api::namespaced(raw_client(), "default")
}

/// A client of the run's API server with the suites' token.
fn raw_client() -> kube::Client {
    let mut config = kube::Config::new(env("KUBE_SERVER").parse().unwrap());
    config.root_cert_file = Some(env("KUBE_CA_FILE").into());
    config.auth_info.token_file = Some(env("KUBE_TOKEN_FILE"));
    kube::Client::try_from(config).unwrap()
}

/// The suites' identity holds only the Role the READMEs document (the
/// namespace's Leases; `cargo xtask test-drivers` runs the API server with
/// RBAC): anything else is refused, so that Role is enough for every case
/// here and for `vvm-host`.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn the_suites_identity_may_use_leases_only() {
    let s = connect_url(&base_url()).await;
    let _ = leases(&s).await.list(&Default::default()).await.unwrap();
    let config_maps: Api<k8s_openapi::api::core::v1::ConfigMap> =
        Api::namespaced(raw_client(), "default");
    match config_maps.list(&Default::default()).await {
        Err(kube::Error::Api(status)) if status.code == 403 => {}
        other => panic!("the identity may do more than use Leases: {other:?}"),
    }
}

/// A Lease as client-go's `LeaseLock` writes it: holder, renewTime,
/// leaseDurationSeconds, no annotations.
fn client_go_lease(name: &str, holder: &str, secs: i32) -> Lease {
    let now = MicroTime(Timestamp::now());
    Lease {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            ..ObjectMeta::default()
        },
        spec: Some(LeaseSpec {
            holder_identity: Some(holder.to_owned()),
            lease_duration_seconds: Some(secs),
            acquire_time: Some(now.clone()),
            renew_time: Some(now),
            lease_transitions: Some(0),
            ..LeaseSpec::default()
        }),
    }
}

/// client-go's view of a Lease read now: held while the holder is not
/// empty and `renewTime + leaseDurationSeconds` has not passed (client-go
/// counts from when it saw the change, which is later still).
fn client_go_sees_held(lease: &Lease) -> bool {
    let spec = lease.spec.as_ref().unwrap();
    let holder = spec.holder_identity.as_deref().unwrap_or("");
    let renewed = spec.renew_time.as_ref().unwrap().0;
    let secs = i64::from(spec.lease_duration_seconds.unwrap());
    !holder.is_empty()
        && renewed
            .checked_add(k8s_openapi::jiff::SignedDuration::from_secs(secs))
            .unwrap()
            > Timestamp::now()
}

/// Interoperation: a Lease a client-go elector holds is a live record
/// holding its `holderIdentity` until `renewTime + leaseDurationSeconds`;
/// then ours takes it over, and client-go reads ours as held, renewed on
/// every renewal; client-go's release (empty holder) frees the key at once.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn a_client_go_lease_is_respected_and_ours_reads_as_one() {
    let s = connect_url(&base_url()).await;
    let api = leases(&s).await;
    let k = lease_key("interop");
    let name = s.lease_name(&k);
    assert_eq!(name, k.as_str(), "a valid Lease name is kept as it is");
    api.create(
        &PostParams::default(),
        &client_go_lease(&name, "client-go-pod-1", 3),
    )
    .await
    .unwrap();
    let ttl = Ttl::from_secs(3).unwrap();
    assert!(!s.insert_if_not_exists(&k, b"ours", ttl).await.unwrap());
    assert_eq!(
        s.get(&k).await.unwrap().as_deref(),
        Some(&b"client-go-pod-1"[..])
    );
    assert!(!s.compare_and_delete(&k, b"ours").await.unwrap());
    // Not before renewTime + 3 s; taken over soon after.
    let started = tokio::time::Instant::now();
    while !s.insert_if_not_exists(&k, b"ours", ttl).await.unwrap() {
        assert!(started.elapsed() < Duration::from_secs(6), "never expired");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(
        started.elapsed() >= Duration::from_millis(2_500),
        "{:?}",
        started.elapsed()
    );
    let ours = api.get(&name).await.unwrap();
    assert!(client_go_sees_held(&ours), "{ours:?}");
    let spec = ours.spec.clone().unwrap();
    assert_eq!(spec.holder_identity.as_deref(), Some("ours"));
    assert_eq!(spec.lease_duration_seconds, Some(3));
    assert_eq!(
        spec.lease_transitions,
        Some(1),
        "a new holder is a transition"
    );
    // A renewal is a change client-go sees (a new renewTime).
    tokio::time::sleep(Duration::from_millis(20)).await;
    assert!(s.compare_and_swap(&k, b"ours", b"ours", ttl).await.unwrap());
    let renewed = api.get(&name).await.unwrap();
    assert!(
        renewed
            .spec
            .as_ref()
            .unwrap()
            .renew_time
            .as_ref()
            .unwrap()
            .0
            > spec.renew_time.unwrap().0
    );
    assert!(client_go_sees_held(&renewed));
    // client-go taking a lease we let expire: we see its holder.
    assert!(s.compare_and_delete(&k, b"ours").await.unwrap());
    api.create(
        &PostParams::default(),
        &client_go_lease(&name, "client-go-pod-2", 30),
    )
    .await
    .unwrap();
    assert_eq!(
        s.get(&k).await.unwrap().as_deref(),
        Some(&b"client-go-pod-2"[..])
    );
    // client-go's release: the holder emptied, the Lease kept.
    let mut released = api.get(&name).await.unwrap();
    released.spec.as_mut().unwrap().holder_identity = Some(String::new());
    api.replace(&name, &PostParams::default(), &released)
        .await
        .unwrap();
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"next", ttl).await.unwrap());
    assert!(s.compare_and_delete(&k, b"next").await.unwrap());
}

/// Two keys that meet at one Lease name (a verbatim key equal to another
/// key's escaped name) never share it: the second is refused with a
/// permanent error naming both, and the first is untouched.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn two_keys_at_one_name_are_refused_not_shared() {
    let s = connect_url(&base_url()).await;
    let escaped = key("clash/One");
    let verbatim = Key::new(s.lease_name(&escaped)).unwrap();
    assert_eq!(s.lease_name(&verbatim), verbatim.as_str());
    let ttl = Ttl::from_secs(30).unwrap();
    assert!(s.insert_if_not_exists(&escaped, b"a", ttl).await.unwrap());
    for result in [
        s.insert_if_not_exists(&verbatim, b"b", ttl).await,
        s.get(&verbatim).await.map(|_| true),
        s.compare_and_swap(&verbatim, b"a", b"b", ttl).await,
        s.compare_and_delete(&verbatim, b"a").await,
    ] {
        let err = result.unwrap_err();
        assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
        assert!(err.to_string().contains("two names meet"), "{err}");
    }
    assert_eq!(s.get(&escaped).await.unwrap().as_deref(), Some(&b"a"[..]));
    assert!(s.compare_and_delete(&escaped, b"a").await.unwrap());
}

/// A server that refuses connections is a transient error at connect time.
#[tokio::test]
async fn refused_connection_is_transient() {
    network::refused_connection_is_transient(|port| async move {
        KubeStorage::from_url(&format!(
            "kube://default?server=https://127.0.0.1:{port}&connect_timeout=1s"
        ))
        .await
    })
    .await;
}

/// With the server's CA every operation works; trusting another CA, the
/// connection is refused, permanently (the certificate is checked).
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn tls_round_trip_and_certificate_check() {
    let s = connect_url(&base_url()).await;
    let wrong = base_url().replace(
        &env("KUBE_CA_FILE"),
        &format!("{}/tests/data/other-ca.pem", env!("CARGO_MANIFEST_DIR")),
    );
    network::tls_round_trip_and_certificate_check(&s, &key("tls"), KubeStorage::from_url(&wrong))
        .await;
}

/// Against a plaintext server the driver's first bytes are a TLS
/// ClientHello, nothing follows the server's plaintext answer, and the
/// failure says once that the server does not speak TLS.
#[tokio::test]
async fn https_to_a_plaintext_server_fails_plainly() {
    let (said, head, rest) = network::what_a_client_sends_first(
        5,
        b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n",
        |port| async move {
            network::tls_to_a_plaintext_server_fails_plainly(
                KubeStorage::from_url(&format!(
                    "kube://default?server=https://127.0.0.1:{port}&connect_timeout=2s"
                )),
                Duration::from_secs(15),
            )
            .await
        },
    )
    .await;
    assert_eq!(head[0], 0x16, "not a TLS handshake record: {head:?}");
    // The rest of the ClientHello and a TLS alert: never a plaintext
    // request, never the token.
    for plaintext in [&b"HTTP/1.1"[..], b"Bearer", b"leases"] {
        assert!(
            !rest.windows(plaintext.len()).any(|w| w == plaintext),
            "sent in plaintext after the refusal: {}",
            String::from_utf8_lossy(&rest)
        );
    }
    assert!(said.contains("listing Leases"), "{said}");
}

/// A wrong token is a permanent error at connect time.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn a_wrong_token_is_permanent() {
    let dir = tempfile::tempdir().unwrap();
    let token = dir.path().join("token");
    std::fs::write(&token, "not-the-token").unwrap();
    let url = base_url().replace(&env("KUBE_TOKEN_FILE"), token.to_str().unwrap());
    let err = KubeStorage::from_url(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("401"), "{err}");
    assert!(!format!("{err:?}").contains("not-the-token"), "{err:?}");
}

/// A write whose answer is lost is outcome unknown, and was applied: the
/// proxy lets the read through, holds the write, then delivers it and
/// swallows its answer. Once the server cannot be reached, a read is
/// transient.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn lost_answers_and_lost_connections() {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let s = connect_url(&url_via(proxy.addr, "&timeout=2s&connect_timeout=1s")).await;
    let k = key("lost");
    let ttl = Ttl::from_secs(30).unwrap();
    assert!(s.insert_if_not_exists(&k, b"a", ttl).await.unwrap());
    proxy.hold_requests_after(1);
    let swap = s.compare_and_swap(&k, b"a", b"b", ttl);
    let lose_the_answer = async {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
        while proxy.held_bytes() == 0 {
            assert!(
                tokio::time::Instant::now() < deadline,
                "the write was never held"
            );
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        proxy.swallow_answers(true);
        proxy.release_requests();
    };
    let (swapped, ()) = tokio::join!(swap, lose_the_answer);
    let err = swapped.expect_err("the answer was swallowed");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_eq!(
        direct.get(&k).await.unwrap().as_deref(),
        Some(&b"b"[..]),
        "not applied"
    );
    let err = s.get(&k).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    proxy.shut_down();
    let err = network::transient_once_gone(|| s.get(&k)).await;
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(direct.compare_and_delete(&k, b"b").await.unwrap());
}

/// A renewal held on the way while another renewal is acknowledged, then
/// delivered: its write carries the version it read, so it cannot land on
/// the newer record; it reads again and renews (true), and the record
/// lives to the acknowledged renewal's start + TTL.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = connect_url(&base_url()).await;
    network::renewal_applied_late_never_moves_the_expiry_earlier(
        server_addr(),
        &direct,
        |proxy| async move { connect_url(&url_via(proxy, "&timeout=20s")).await },
        &key("late-renewal"),
        1,
    )
    .await;
}

/// A watch whose connection drops completes (its waiter re-checks: a
/// waiter never hangs on a dead watch), and a watch made while the server
/// cannot be reached completes too (its read fails), within 10 s each.
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn a_watch_whose_connection_drops_completes() {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let s = connect_url(&url_via(proxy.addr, "&timeout=2s&connect_timeout=1s")).await;
    let k = key("dropped-watch");
    assert!(
        direct
            .insert_if_not_exists(&k, b"a", Ttl::NEVER)
            .await
            .unwrap()
    );
    let mut watch = s.watch(&k).unwrap();
    assert!(
        tokio::time::timeout(Duration::from_secs(2), &mut watch)
            .await
            .is_err(),
        "the watch completed although the record is still there"
    );
    proxy.shut_down();
    assert!(
        network::completes_within(watch, Duration::from_secs(10)).await,
        "a watch whose connection dropped did not complete"
    );
    assert!(
        network::completes_within(s.watch(&k).unwrap(), Duration::from_secs(10)).await,
        "a watch made while the server is unreachable did not complete"
    );
    assert!(direct.compare_and_delete(&k, b"a").await.unwrap());
}

/// A standby's watch on one connection wakes when another connection
/// deletes the record (the Lease watch API).
#[tokio::test]
#[ignore = "needs kube-apiserver: run `cargo xtask test-drivers --engine kube`"]
async fn watch_wakes_on_a_delete_by_another_connection() {
    let a = connect_url(&base_url()).await;
    let b = connect_url(&base_url()).await;
    network::watch_wakes_on_a_delete_by_another_connection(
        &a,
        &b,
        &key("watch"),
        Duration::from_secs(2),
    )
    .await;
}
