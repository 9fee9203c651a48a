//! The shared `elections-testsuite`, plus this driver's own cases, against a
//! real Valkey or Redis server named by `VALKEY_URL`.
//!
//! Run with `cargo xtask test-drivers --engine valkey`, which starts a local
//! `valkey-server` or `redis-server` (with a TLS port too) and sets
//! `VALKEY_URL` and `VALKEY_TLS_URL`; or point them at your own server (the
//! cases write keys under `ttl:` and `suite-*:`, and create one ACL user,
//! `storage-valkey-suite`):
//!
//! ```text
//! VALKEY_URL=redis://127.0.0.1:6379 \
//! VALKEY_TLS_URL='rediss://127.0.0.1:6380?tls_ca_file=/path/ca.pem' \
//!     cargo test -p storage-valkey --test suite -- --ignored --test-threads 16
//! ```

// Test code: a panic with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use elections_testsuite::network;
use fred::prelude::{ClientLike, HashesInterface, KeysInterface};
use storage_valkey::ValkeyStorage;
use ttl_storage::{DynTtlStorage, ErrorKind, Key, TimeLeft, Ttl, TtlStorage};

fn base_url() -> String {
    network::env_url("VALKEY_URL", "valkey", "redis://host:6379")
}

/// One server's URL: `VALKEY_PRIMARY_URL` when `VALKEY_URL` names Sentinels
/// (`cargo xtask test-drivers --engine valkey-sentinel` sets both), else
/// `VALKEY_URL`. The cases that edit the URL or put a proxy in front of the
/// server use it.
fn direct_url() -> String {
    std::env::var("VALKEY_PRIMARY_URL").unwrap_or_else(|_| base_url())
}

/// The direct URL changed by `edit`.
fn url_with(edit: impl FnOnce(&mut url::Url)) -> String {
    let mut url = url::Url::parse(&direct_url()).unwrap();
    edit(&mut url);
    url.to_string()
}

fn server_addr() -> SocketAddr {
    let url = url::Url::parse(&direct_url()).unwrap();
    let host = url.host_str().unwrap().trim_matches(['[', ']']).to_string();
    let port = url.port().unwrap_or(6379);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap()
        .next()
        .unwrap()
}

async fn connect() -> ValkeyStorage {
    let url = base_url();
    match ValkeyStorage::from_url(&url).await {
        Ok(storage) => storage,
        Err(err) => panic!("connecting to {url}: {err:?}"),
    }
}

async fn make_storage() -> DynTtlStorage {
    Arc::new(connect().await)
}

elections_testsuite::testsuite!(
    real_time,
    make_storage,
    watch = required,
    ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"
);

async fn make_fence() -> fence::DynFence {
    Arc::new(storage_valkey::fence::ValkeyFence::owning(connect().await))
}

fence::suite!(
    make_fence,
    ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"
);

fn key(name: &str) -> Key {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Key::new(format!("valkey-driver/{name}/{nanos}")).unwrap()
}

fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).unwrap()
}

/// Records are string keys under the prefix, with a millisecond TTL set by
/// the server; `Ttl::NEVER` means no expiry, and a swap replaces the TTL.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn records_are_prefixed_keys_with_px_ttl() {
    let s = connect().await;
    let k = key("px");
    let raw = format!("ttl:{k}");
    assert_eq!(s.server_key(&k), raw);
    assert!(s.insert_if_not_exists(&k, b"v", ttl(20)).await.unwrap());
    let pttl: i64 = s.client().pttl(raw.as_str()).await.unwrap();
    assert!((19_000..=20_000).contains(&pttl), "PTTL {pttl}");
    let stored: Vec<u8> = s.client().get(raw.as_str()).await.unwrap();
    assert_eq!(stored, b"v");
    // get_entry reports the same PTTL.
    let entry = s.get_entry(&k).await.unwrap().unwrap();
    elections_testsuite::assert_time_left(
        &entry,
        b"v",
        Duration::from_secs(19)..=Duration::from_secs(20),
    );

    assert!(
        s.compare_and_swap(&k, b"v", b"w", Ttl::NEVER)
            .await
            .unwrap()
    );
    let pttl: i64 = s.client().pttl(raw.as_str()).await.unwrap();
    assert_eq!(pttl, -1, "a swap to Ttl::NEVER removes the expiry");
    let entry = s.get_entry(&k).await.unwrap().unwrap();
    assert_eq!(entry.time_left, TimeLeft::Never);

    assert!(s.compare_and_swap(&k, b"w", b"x", ttl(1)).await.unwrap());
    let pttl: i64 = s.client().pttl(raw.as_str()).await.unwrap();
    assert!((1..=1_000).contains(&pttl), "PTTL {pttl}");
    tokio::time::sleep(Duration::from_millis(1_300)).await;
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&k, b"y", ttl(5)).await.unwrap());
}

/// The `prefix` parameter moves every key.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn prefix_parameter() {
    let url = url_with(|u| u.set_query(Some("prefix=suite-prefix:")));
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    let k = key("prefix");
    assert!(s.insert_if_not_exists(&k, b"p", ttl(5)).await.unwrap());
    let raw: Option<Vec<u8>> = s.client().get(format!("suite-prefix:{k}")).await.unwrap();
    assert_eq!(raw.as_deref(), Some(&b"p"[..]));
    let default_prefixed: Option<Vec<u8>> = s.client().get(format!("ttl:{k}")).await.unwrap();
    assert_eq!(default_prefixed, None);
}

/// Another type at a record's key is a permanent error (`WRONGTYPE`), not
/// a lost lease or a retry.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn wrong_type_is_permanent() {
    let s = connect().await;
    let k = key("wrongtype");
    let _: i64 = s
        .client()
        .hset(s.server_key(&k), ("field", "value"))
        .await
        .unwrap();
    let err = s.get(&k).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("WRONGTYPE"), "{err}");
    let err = s
        .compare_and_swap(&k, b"a", b"b", ttl(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    let err = s.compare_and_delete(&k, b"a").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    // A live key of any type blocks an insert.
    assert!(!s.insert_if_not_exists(&k, b"a", ttl(5)).await.unwrap());
}

/// The scripts are re-sent after `SCRIPT FLUSH` (a restarted or new primary).
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn scripts_survive_script_flush() {
    let s = connect().await;
    let k = key("noscript");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(5)).await.unwrap());
    let flush = fred::types::CustomCommand::new_static("SCRIPT", None, false);
    let _: String = s.client().custom(flush, vec!["FLUSH"]).await.unwrap();
    assert!(s.compare_and_swap(&k, b"a", b"b", ttl(5)).await.unwrap());
    assert!(s.compare_and_delete(&k, b"b").await.unwrap());
}

/// `user:password@` authenticates with an ACL user; a wrong password is a
/// permanent error whose message does not show the password.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn acl_user_and_wrong_password() {
    let admin = connect().await;
    let acl = fred::types::CustomCommand::new_static("ACL", None, false);
    let _: String = admin
        .client()
        .custom(
            acl,
            vec![
                "SETUSER",
                "storage-valkey-suite",
                "reset",
                "on",
                ">pa:ss@wörd",
                "~ttl:*",
                "+@all",
            ],
        )
        .await
        .unwrap();
    let good = url_with(|u| {
        u.set_username("storage-valkey-suite").unwrap();
        u.set_password(Some("pa%3Ass%40w%C3%B6rd")).unwrap();
    });
    let s = ValkeyStorage::from_url(&good).await.unwrap();
    let k = key("acl");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(5)).await.unwrap());
    assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(&b"a"[..]));

    let bad = url_with(|u| {
        u.set_username("storage-valkey-suite").unwrap();
        u.set_password(Some("hunter2")).unwrap();
    });
    let err = ValkeyStorage::from_url(&bad).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
}

/// `rediss://` to a plaintext port fails; it never falls back to plaintext.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn rediss_to_plaintext_port_fails() {
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let url = url_with(|u| {
        u.set_scheme("rediss").unwrap();
        u.query_pairs_mut()
            .append_pair("tls_ca_file", ca)
            .append_pair("connect_timeout", "2s");
    });
    let result = tokio::time::timeout(Duration::from_secs(10), ValkeyStorage::from_url(&url))
        .await
        .expect("a TLS handshake with a plaintext server must fail, not hang");
    let err = result.expect_err("rediss:// must not connect to a plaintext port");
    // The plaintext server waits for the rest of a "command" that never
    // comes, so the handshake times out: transient (indistinguishable from
    // a slow network), never a plaintext session.
    assert_ne!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
}

fn tls_url() -> String {
    std::env::var("VALKEY_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "VALKEY_TLS_URL is not set: `cargo xtask test-drivers --engine valkey` sets it; with \
             your own server set VALKEY_TLS_URL=rediss://host:port?tls_ca_file=/path/ca.pem"
        )
    })
}

/// Over `rediss://` with the server's CA, every operation works; with
/// another CA the connection is refused (the certificate is checked).
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn tls_round_trip_and_certificate_check() {
    let s = ValkeyStorage::from_url(&tls_url()).await.unwrap();
    assert!(s.config().tls().is_some());
    let other_ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let mut wrong = url::Url::parse(&tls_url()).unwrap();
    wrong.set_query(Some(&format!("tls_ca_file={other_ca}")));
    let wrong_ca = ValkeyStorage::from_url(wrong.as_str());
    network::tls_round_trip_and_certificate_check(&s, &key("tls"), wrong_ca).await;
}

/// What a `rediss://` client sends first is a TLS ClientHello, never a
/// plaintext command (checked on the wire, against a listener that never
/// answers).
#[tokio::test]
async fn rediss_sends_a_tls_client_hello_first() {
    use tokio::io::AsyncReadExt;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let sniff = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut first = [0u8; 3];
        conn.read_exact(&mut first).await.unwrap();
        first
    });
    let ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let url = format!("rediss://:secret@127.0.0.1:{port}?tls_ca_file={ca}&connect_timeout=1s");
    let err = ValkeyStorage::from_url(&url).await.unwrap_err();
    assert!(!err.to_string().contains("secret"), "{err}");
    let first = sniff.await.unwrap();
    // TLS record type 22 (handshake), protocol 3.x; a RESP command starts with '*'.
    assert_eq!(
        first[0], 0x16,
        "first byte {first:?} is not a TLS handshake"
    );
    assert_eq!(first[1], 0x03);
}

/// A server that refuses connections is a transient error, at connect time.
#[tokio::test]
async fn refused_connection_is_transient() {
    network::refused_connection_is_transient(|port| async move {
        ValkeyStorage::from_url(&format!("redis://127.0.0.1:{port}")).await
    })
    .await;
}

/// A write whose answer is lost after it was sent is outcome unknown (and
/// here it was in fact applied); a read in the same situation is
/// transient; once the connection is gone, operations are transient
/// without being sent.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn lost_answers_and_lost_connections() {
    let direct = connect().await;
    let proxy = elections_testsuite::proxy::Proxy::start(server_addr())
        .await
        .unwrap();
    let url = format!("redis://{}?timeout=500ms&connect_timeout=500ms", proxy.addr);
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    let k = key("lost");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(10)).await.unwrap());
    network::lost_answer_of_a_write_is_outcome_unknown(&s, &direct, &proxy, &k, ttl(10), true)
        .await;

    proxy.shut_down();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.client().is_connected() {
        assert!(tokio::time::Instant::now() < deadline, "still connected");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let err = s.compare_and_delete(&k, b"b").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    let err = s.insert_if_not_exists(&k, b"c", ttl(10)).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
    assert_eq!(direct.get(&k).await.unwrap().as_deref(), Some(&b"b"[..]));
}

/// Issue 34, case 7 (the shared case): a renewal held 2.5 s on its way
/// lands after a later one was acknowledged; the server sets `PX` when it
/// runs the script, so it can only lengthen the lease.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = connect().await;
    let proxy = elections_testsuite::proxy::Proxy::start(server_addr())
        .await
        .unwrap();
    let url = format!("redis://{}?timeout=20s", proxy.addr);
    let held = ValkeyStorage::from_url(&url).await.unwrap();
    network::renewal_applied_late_never_moves_the_expiry_earlier(
        &held,
        &direct,
        &proxy,
        &key("late-renewal"),
        0,
    )
    .await;
}

/// `ValkeyFence::set` guards a key of the caller's (not the register of
/// `fence::Fence::write`): a refused write leaves it unchanged, and racing
/// writers leave the highest token's value. The shared `fence_suite`
/// covers the rest of the contract.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn fence_set_guards_the_callers_key() {
    use storage_valkey::fence::{FenceOutcome, ValkeyFence};
    let s = connect().await;
    let fence = ValkeyFence::new(&s);
    let resource = key("fence").to_string();
    let data = format!("suite-fenced:{resource}");
    let read = || async {
        s.client()
            .get::<Option<Vec<u8>>, _>(data.as_str())
            .await
            .unwrap()
    };
    assert_eq!(
        fence.set(&resource, 5, &data, b"five").await.unwrap(),
        FenceOutcome::Accepted
    );
    assert_eq!(
        fence.set(&resource, 3, &data, b"three").await.unwrap(),
        FenceOutcome::Rejected { highest: 5 }
    );
    assert_eq!(read().await.as_deref(), Some(&b"five"[..]));
    let big = (1u64 << 60) + 1;
    assert_eq!(
        fence.set(&resource, big, &data, b"big").await.unwrap(),
        FenceOutcome::Accepted
    );
    assert_eq!(
        fence
            .set(&resource, big - 1, &data, b"big-1")
            .await
            .unwrap(),
        FenceOutcome::Rejected { highest: big }
    );
    assert_eq!(read().await.as_deref(), Some(&b"big"[..]));

    // Racing writers: the highest token always wins the last word.
    let other = format!("{resource}/race");
    let writes: Vec<_> = (1..=16u64)
        .map(|token| {
            let fence = fence.clone();
            let (other, data) = (other.clone(), format!("{data}/race"));
            tokio::spawn(async move {
                fence
                    .set(&other, token, &data, token.to_string().as_bytes())
                    .await
            })
        })
        .collect();
    for write in writes {
        write.await.unwrap().unwrap();
    }
    let last: Option<Vec<u8>> = s.client().get(format!("{data}/race")).await.unwrap();
    assert_eq!(last.as_deref(), Some(&b"16"[..]));
}

/// A compare-and-delete by another connection (another process, in
/// production) wakes a watcher, and a key without expiry is watched
/// without a timer: nothing but the delete wakes it.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn watch_wakes_on_a_delete_by_another_connection() {
    let watcher = connect().await;
    let deleter = connect().await;
    // A renewal (a swap) publishes nothing; there is no timer either.
    network::watch_wakes_on_a_delete_by_another_connection(
        &watcher,
        &deleter,
        &key("watch-other"),
        Duration::from_millis(300),
    )
    .await;
}

/// The delete is published on `<prefix>__deleted` with the server key as
/// the message (what another client could subscribe to as well).
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn compare_and_delete_publishes_the_key() {
    use fred::prelude::{EventInterface, PubsubInterface};
    // Its own prefix, so its own channel: other cases delete concurrently.
    let url = url_with(|u| u.set_query(Some("prefix=suite-publish:")));
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    assert_eq!(s.watch_channel(), "suite-publish:__deleted");
    let listener = fred::prelude::Builder::from_config(
        fred::prelude::Config::from_url(&direct_url()).unwrap(),
    )
    .build()
    .unwrap();
    let mut messages = listener.message_rx();
    listener.init().await.unwrap();
    listener.subscribe(s.watch_channel()).await.unwrap();
    let k = key("published");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    assert!(!s.compare_and_delete(&k, b"other").await.unwrap());
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    let message = tokio::time::timeout(Duration::from_secs(10), messages.recv())
        .await
        .expect("no message published")
        .unwrap();
    assert_eq!(&*message.channel, "suite-publish:__deleted");
    // Only the successful delete published.
    assert_eq!(
        message.value.as_str().as_deref(),
        Some(s.server_key(&k).as_str())
    );
    assert!(
        tokio::time::timeout(Duration::from_millis(200), messages.recv())
            .await
            .is_err()
    );
}

/// When the subscriber's connection dies, a pending watch completes (its
/// waiter re-checks and polls) and new watches answer `WatchUnsupported`
/// until the subscriber is back: a waiter never hangs on a dead
/// subscription.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn dead_subscriber_wakes_and_reports_unsupported() {
    let direct = connect().await;
    let proxy = elections_testsuite::proxy::Proxy::start(server_addr())
        .await
        .unwrap();
    let url = format!("redis://{}?timeout=500ms&connect_timeout=500ms", proxy.addr);
    let s = ValkeyStorage::from_url(&url).await.unwrap();
    let k = key("dead-subscriber");
    assert!(
        direct
            .insert_if_not_exists(&k, b"a", Ttl::NEVER)
            .await
            .unwrap()
    );
    let mut watch = s.watch(&k).unwrap();
    // Armed and waiting (its PTTL read done): only the subscriber's
    // failure can wake it now.
    assert!(
        tokio::time::timeout(Duration::from_millis(300), &mut watch)
            .await
            .is_err()
    );
    proxy.shut_down();
    assert!(
        network::completes_within(watch, Duration::from_secs(10)).await,
        "a watch on a dead subscription did not complete"
    );
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while s.watch(&k).is_ok() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "watch still supported on a dead connection"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(direct.compare_and_delete(&k, b"a").await.unwrap());
}

/// A user that may not use the delete channel (Redis 7's default ACL gives
/// new users no channels) still deletes, and its watches answer
/// `WatchUnsupported` (the subscription was refused) instead of hanging.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn user_without_channel_rights_deletes_and_polls() {
    let admin = connect().await;
    let acl = fred::types::CustomCommand::new_static("ACL", None, false);
    let _: String = admin
        .client()
        .custom(
            acl,
            vec![
                "SETUSER",
                "storage-valkey-nochannels",
                "reset",
                "on",
                ">nochannels",
                "~ttl:*",
                "resetchannels",
                "+@all",
            ],
        )
        .await
        .unwrap();
    let url = url_with(|u| {
        u.set_username("storage-valkey-nochannels").unwrap();
        u.set_password(Some("nochannels")).unwrap();
        u.set_query(Some("connect_timeout=1h"));
    });
    // The refused probe ends the wait for the subscription: connecting
    // does not hang until the (one hour) connect timeout.
    let s = tokio::time::timeout(Duration::from_secs(60), ValkeyStorage::from_url(&url))
        .await
        .expect("connecting waited for the connect timeout although the channel is refused")
        .unwrap();
    let k = key("nochannels");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    assert!(
        s.watch(&k).is_err(),
        "a refused subscription must report unsupported"
    );
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    assert_eq!(admin.get(&k).await.unwrap(), None);
}

/// With `wait_replicas`, a write counts only once that many replicas have
/// it: asking for one replica more than the server has
/// (`VALKEY_REPLICAS`, set by `cargo xtask test-drivers`; 0 when unset)
/// makes an applied write outcome unknown, never success, and the write is
/// in fact on the server; asking for the replicas it has succeeds.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn unconfirmed_replication_is_outcome_unknown() {
    let replicas: u32 = std::env::var("VALKEY_REPLICAS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let too_many = url_with(|u| {
        u.set_query(Some(&format!(
            "wait_replicas={}&wait_timeout=200ms",
            replicas + 1
        )))
    });
    let s = ValkeyStorage::from_url(&too_many).await.unwrap();
    let k = key("wait");
    let err = s
        .insert_if_not_exists(&k, b"a", ttl(20))
        .await
        .expect_err("a write no replica confirmed must not succeed");
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    assert_eq!(s.get(&k).await.unwrap().as_deref(), Some(&b"a"[..]));
    let err = s
        .compare_and_swap(&k, b"a", b"b", ttl(20))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err}");
    // Not applied: nothing to wait for, a plain answer.
    assert!(!s.compare_and_swap(&k, b"zzz", b"c", ttl(20)).await.unwrap());
    if replicas > 0 {
        let enough =
            url_with(|u| u.set_query(Some(&format!("wait_replicas={replicas}&wait_timeout=2s"))));
        let s = ValkeyStorage::from_url(&enough).await.unwrap();
        assert!(s.compare_and_swap(&k, b"b", b"d", ttl(20)).await.unwrap());
        assert!(s.compare_and_delete(&k, b"d").await.unwrap());
    }
}
