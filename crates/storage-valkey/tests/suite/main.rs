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

mod connection;
mod watch;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use elections_testsuite::network;
use fred::prelude::{ClientLike, HashesInterface, KeysInterface};
use storage_valkey::ValkeyStorage;
use ttl_storage::{DynTtlStorage, ErrorKind, Key, Ttl, TtlStorage};

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
    network::server_addr(&direct_url(), 6379)
}

async fn connect() -> ValkeyStorage {
    let url = base_url();
    match ValkeyStorage::from_url(&url).await {
        Ok(storage) => storage,
        Err(err) => panic!("connecting to {url}: {err:?}"),
    }
}

/// Creates (or resets) the ACL user `user`, enabled, with `rules` (its
/// password, keys, channels and commands), through `admin`.
async fn set_acl_user(admin: &ValkeyStorage, user: &str, rules: &[&str]) {
    let acl = fred::types::CustomCommand::new_static("ACL", None, false);
    let mut args = vec!["SETUSER", user, "reset", "on"];
    args.extend_from_slice(rules);
    let _: String = admin
        .client()
        .custom(acl, args)
        .await
        .unwrap_or_else(|err| panic!("ACL SETUSER {user}: {err}"));
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
    network::unique_key("valkey-driver", name)
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
    let engine_left = || async {
        let pttl: i64 = s.client().pttl(raw.as_str()).await.unwrap();
        // -1: no expiry (the key exists: the case reads only live keys)
        u64::try_from(pttl).ok().map(Duration::from_millis)
    };
    elections_testsuite::assert_engine_expiry_follows_ttl(
        &s,
        &k,
        engine_left,
        Duration::from_secs(19)..=Duration::from_secs(20),
        Duration::from_millis(1_300),
    )
    .await;
    let stored: Vec<u8> = s.client().get(raw.as_str()).await.unwrap();
    assert_eq!(stored, b"y", "the record is the key's plain value");
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

/// `ValkeyFence::set` guards a key of the caller's (not the register of
/// `fence::Fence::write`): a refused write leaves it unchanged, and racing
/// writers leave the highest token's value. The shared `fence_suite`
/// covers the rest of the contract.
#[tokio::test]
#[ignore = "needs Valkey/Redis: run `cargo xtask test-drivers --engine valkey`"]
async fn fence_set_guards_the_callers_key() {
    use storage_valkey::fence::ValkeyFence;
    let s = connect().await;
    let fence = ValkeyFence::new(&s);
    let resource = key("fence").to_string();
    let data = format!("suite-fenced:{resource}");
    let storage = &s;
    let read = move |key: String| async move {
        storage
            .client()
            .get::<Option<Vec<u8>>, _>(key.as_str())
            .await
            .unwrap()
    };
    let set = move |resource: String, token: u64, key: String, value: Vec<u8>| {
        let fence = fence.clone();
        async move { fence.set(&resource, token, &key, &value).await }
    };
    fence::suite::guarded_key_case(&resource, &data, set, read).await;
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
