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

/// The feed of a key's writes (`changes`) across a dropped connection:
/// its watch is made again from the revision after the last event, so the
/// writes made meanwhile are reported, in order, without an interruption.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn changes_resume_after_a_dropped_connection() {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let url = format!("etcd://{}?timeout=1s&connect_timeout=1s", proxy.addr);
    let s = connect_url(&url).await;
    network::a_lost_feed_resumes_or_says_it_was_interrupted(&direct, &s, &proxy, &key("blip"))
        .await;
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

/// The lease and `mod_revision` of a raw key, as etcd holds it now.
async fn lease_and_revision(s: &EtcdStorage, raw: &str) -> Option<(i64, i64)> {
    let client = s.client().clone();
    let response = unsent_retry(|| {
        let mut client = client.clone();
        let raw = raw.to_string();
        async move { client.get(raw, None).await }
    })
    .await;
    response
        .kvs()
        .first()
        .map(|kv| (kv.lease(), kv.mod_revision()))
}

/// One etcd lease per TTL for every record a storage holds: 40 records of
/// one TTL and 5 of another, written and renewed twice, sit on two leases
/// (`LeaseTimeToLive` lists exactly them; `LeaseLeases`, what `etcdctl
/// lease list` prints, shows both), and a renewal writes nothing (the
/// records' `mod_revision` is unchanged). On the driver that granted a
/// lease per write this was 45 leases, and every renewal a write.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn one_lease_per_ttl_whatever_the_number_of_records() {
    let s = connect_url(&base_url()).await;
    let (long, short) = (Ttl::from_secs(30).unwrap(), Ttl::from_secs(20).unwrap());
    let keys: Vec<(Key, Ttl)> = (0..45)
        .map(|i| {
            (
                key(&format!("one-lease-{i}")),
                if i < 40 { long } else { short },
            )
        })
        .collect();
    for (k, ttl) in &keys {
        assert!(s.insert_if_not_exists(k, b"v", *ttl).await.unwrap());
    }
    let before: Vec<_> = leases_and_revisions(&s, &keys).await;
    for _ in 0..2 {
        let renewals = keys
            .iter()
            .map(|(k, ttl)| s.compare_and_swap(k, b"v", b"v", *ttl));
        for renewed in futures::future::join_all(renewals).await {
            assert!(renewed.unwrap(), "a renewal of a held record failed");
        }
    }
    let after: Vec<_> = leases_and_revisions(&s, &keys).await;
    assert_eq!(
        before, after,
        "a renewal rewrote a record (lease or revision changed)"
    );
    let leases: std::collections::BTreeSet<i64> = after.iter().map(|(lease, _)| *lease).collect();
    assert_eq!(leases.len(), 2, "records of two TTLs on {leases:?}");
    assert!(!leases.contains(&0));
    let client = s.client().clone();
    let listed = unsent_retry(|| {
        let mut client = client.clone();
        async move { client.leases().await }
    })
    .await;
    let listed: Vec<i64> = listed.leases().iter().map(|l| l.id()).collect();
    for lease in &leases {
        assert!(listed.contains(lease), "lease {lease} not in {listed:?}");
        let on_it = unsent_retry(|| {
            let mut client = client.clone();
            let options = etcd_client::LeaseTimeToLiveOptions::new().with_keys();
            async move { client.lease_time_to_live(*lease, Some(options)).await }
        })
        .await;
        let mut attached: Vec<String> = on_it
            .keys()
            .iter()
            .map(|k| String::from_utf8_lossy(k).into_owned())
            .collect();
        attached.sort();
        let mut expected: Vec<String> = keys
            .iter()
            .zip(&after)
            .filter(|(_, (l, _))| l == lease)
            .map(|((k, _), _)| s.server_key(k))
            .collect();
        expected.sort();
        assert_eq!(attached, expected, "the keys on lease {lease}");
    }
    for (k, _) in &keys {
        assert!(s.compare_and_delete(k, b"v").await.unwrap());
    }
}

async fn leases_and_revisions(s: &EtcdStorage, keys: &[(Key, Ttl)]) -> Vec<(i64, i64)> {
    let reads = keys.iter().map(|(k, _)| {
        let raw = s.server_key(k);
        async move { lease_and_revision(s, &raw).await.expect("a live record") }
    });
    futures::future::join_all(reads).await
}

/// A record the caller stops renewing (without deleting it) still expires
/// although the lease it shares with other records is kept alive by their
/// renewals: it is deleted once no one renewed it for a whole TTL, by
/// this storage (within two TTLs of its last renewal), while the renewed
/// record lives on.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn a_record_no_one_renews_expires_while_its_lease_is_kept_alive() {
    let s = connect_url(&base_url()).await;
    let direct = connect_url(&base_url()).await;
    let ttl = Ttl::from_secs(3).unwrap();
    let (forgotten, renewed) = (key("forgotten"), key("renewed"));
    assert!(s.insert_if_not_exists(&forgotten, b"f", ttl).await.unwrap());
    assert!(s.insert_if_not_exists(&renewed, b"r", ttl).await.unwrap());
    let started = tokio::time::Instant::now();
    let gone_after =
        renew_until_gone(&s, &direct, &renewed, &forgotten, started, Renewals::Hold).await;
    let gone_after =
        gone_after.expect("the forgotten record outlived 8 s of its lease's keep-alives");
    assert!(
        gone_after >= Duration::from_millis(2_900),
        "the forgotten record was deleted before its TTL: {gone_after:?}"
    );
    assert_eq!(direct.get(&renewed).await.unwrap(), Some(b"r".to_vec()));
    assert!(s.compare_and_delete(&renewed, b"r").await.unwrap());
}

/// A renewal of a value this storage has since replaced with another
/// (a stale renewal racing the storage's own swap) finds the record not
/// its value and fails, but must not forget the record it does hold: the
/// new value, left unrenewed, is still deleted after a whole TTL while the
/// lease lives on (kept alive for another record).
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn a_stale_renewal_does_not_keep_the_storages_newer_record_alive() {
    let s = connect_url(&base_url()).await;
    let direct = connect_url(&base_url()).await;
    let ttl = Ttl::from_secs(3).unwrap();
    let (swapped, renewed) = (key("swapped"), key("kept-renewed"));
    assert!(s.insert_if_not_exists(&swapped, b"v", ttl).await.unwrap());
    assert!(s.insert_if_not_exists(&renewed, b"r", ttl).await.unwrap());
    assert!(s.compare_and_swap(&swapped, b"v", b"w", ttl).await.unwrap());
    // the stale renewal of v: not ours any more
    assert!(!s.compare_and_swap(&swapped, b"v", b"v", ttl).await.unwrap());
    let started = tokio::time::Instant::now();
    renew_until_gone(&s, &direct, &renewed, &swapped, started, Renewals::Hold)
        .await
        .expect("w, never renewed, outlived 8 s of its lease's keep-alives");
    assert!(s.compare_and_delete(&renewed, b"r").await.unwrap());
}

/// A write whose answer is lost leaves a record this storage cannot name
/// by revision, so its sweep cannot delete it for certain: it retires the
/// shared lease instead (a new one for the records it renews), and the
/// record, applied on the old lease, lapses with it. Here the insert's
/// keep-alive is answered, its transaction held in the proxy, then let
/// through with its answer swallowed: the insert lands, the call says
/// outcome unknown, and no one renews the record. It must be gone within
/// two TTLs of the call (plus a sweep interval and the keep-alive's
/// lapse), while the record renewed every 0.5 s lives on.
#[tokio::test]
#[ignore = "needs etcd: run `cargo xtask test-drivers --engine etcd`"]
async fn a_record_left_by_a_lost_answer_lapses_with_its_retired_lease() {
    let direct = connect_url(&base_url()).await;
    let proxy = network::proxy_to(server_addr()).await;
    let s = connect_url(&format!("etcd://{}?timeout=1s", proxy.addr)).await;
    let ttl = Ttl::from_secs(3).unwrap();
    let (late, renewed) = (key("lost-answer"), key("renewed-beside"));
    assert!(s.insert_if_not_exists(&renewed, b"r", ttl).await.unwrap());
    proxy.hold_requests_after(1);
    let started = tokio::time::Instant::now();
    let insert = s.insert_if_not_exists(&late, b"l", ttl);
    let lose_the_answer = async {
        tokio::time::sleep(Duration::from_millis(300)).await;
        proxy.swallow_answers(true);
        proxy.release_requests();
    };
    let (inserted, ()) = tokio::join!(insert, lose_the_answer);
    proxy.swallow_answers(false);
    let err = inserted.expect_err("the answer was swallowed");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_eq!(
        direct.get(&late).await.unwrap(),
        Some(b"l".to_vec()),
        "the held insert did not land"
    );
    // a renewal right after the swallowed answers may find the connection
    // still recovering: the last one, below, must hold
    let gone_after = renew_until_gone(&s, &direct, &renewed, &late, started, Renewals::MayFail)
        .await
        .expect("the record of the lost answer outlived 10 s");
    eprintln!("the record of the lost answer was gone after {gone_after:?}");
    assert!(
        gone_after >= Duration::from_millis(2_900),
        "gone before its TTL: {gone_after:?}"
    );
    // two TTLs, a sweep interval, and this loop's half-second steps
    assert!(
        gone_after <= Duration::from_millis(7_500),
        "outlived two TTLs and a sweep: {gone_after:?}"
    );
    assert!(s.compare_and_swap(&renewed, b"r", b"r", ttl).await.unwrap());
    assert_eq!(direct.get(&renewed).await.unwrap(), Some(b"r".to_vec()));
    assert!(s.compare_and_delete(&renewed, b"r").await.unwrap());
}

/// Whether each renewal of [`renew_until_gone`] must succeed.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Renewals {
    /// Every renewal must find the record.
    Hold,
    /// Renewals may fail (the connection is recovering).
    MayFail,
}

/// Renews `renewed` (value `r`, 3 s TTL) through `s` every 0.5 s, for 8 s
/// after `started` (10 s when renewals may fail), and returns how long after
/// `started` `watched` was first seen gone by `direct`.
async fn renew_until_gone(
    s: &EtcdStorage,
    direct: &EtcdStorage,
    renewed: &Key,
    watched: &Key,
    started: tokio::time::Instant,
    renewals: Renewals,
) -> Option<Duration> {
    let ttl = Ttl::from_secs(3).unwrap();
    let window = match renewals {
        Renewals::Hold => Duration::from_secs(8),
        Renewals::MayFail => Duration::from_secs(10),
    };
    let mut gone_after = None;
    while started.elapsed() < window {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let renewal = s.compare_and_swap(renewed, b"r", b"r", ttl).await;
        if renewals == Renewals::Hold {
            assert!(renewal.unwrap(), "the renewed record was lost");
        }
        if gone_after.is_none() && direct.get(watched).await.unwrap().is_none() {
            gone_after = Some(started.elapsed());
        }
    }
    gone_after
}
