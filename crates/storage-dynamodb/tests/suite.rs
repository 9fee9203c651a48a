//! The shared `elections-testsuite` and the driver's own cases, against a
//! real DynamoDB (Local): run with `cargo xtask test-drivers --engine dynamodb`,
//! or point `DYNAMODB_ENDPOINT` at a DynamoDB and run
//! `cargo test -p storage-dynamodb --test suite -- --ignored --test-threads 16`.

// Test helpers outside #[test] functions panic on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use storage_dynamodb::{
    ConnectError, DynamoDbConfig, DynamoDbConfigBuilder, DynamoDbStorage, ExpiryMode,
};
use ttl_storage::{DynTtlStorage, Key, TimeLeft, Ttl, TtlStorage};

const TABLE: &str = "ttl_storage_suite";

/// A config for the table `table` on the DynamoDB named by `DYNAMODB_ENDPOINT`.
fn config(table: &str, create: bool) -> DynamoDbConfig {
    builder(table, create).build().expect("valid test config")
}

fn builder(table: &str, create: bool) -> DynamoDbConfigBuilder {
    let endpoint = std::env::var("DYNAMODB_ENDPOINT").unwrap_or_default();
    assert!(
        !endpoint.is_empty(),
        "DYNAMODB_ENDPOINT is not set: run `cargo xtask test-drivers --engine dynamodb`"
    );
    let region = std::env::var("AWS_REGION").unwrap_or_else(|_| "us-east-1".into());
    let mut builder = DynamoDbConfig::builder(table)
        .endpoint(endpoint)
        .region(region)
        .create_table(create);
    if std::env::var_os("AWS_ACCESS_KEY_ID").is_none() {
        // DynamoDB Local accepts any alphanumeric key id.
        builder = builder.credentials("local", "local", None);
    }
    builder
}

async fn make_storage() -> DynTtlStorage {
    // Logs show up with the output of a failing case.
    let _ = tracing_subscriber::fmt()
        .with_env_filter("warn,storage_dynamodb=debug")
        .with_test_writer()
        .try_init();
    let storage = DynamoDbStorage::connect(config(TABLE, true))
        .await
        .expect("connect to DynamoDB");
    Arc::new(storage)
}

elections_testsuite::testsuite!(
    real_time,
    make_storage,
    ignore = "needs DynamoDB: run `cargo xtask test-drivers`"
);

/// The fence in the table `fence_test` (and `fence_test_log`), created if
/// missing, on the storage's client.
async fn make_fence() -> fence::DynFence {
    use storage_dynamodb::fence::DynamoDbFence;
    let storage = DynamoDbStorage::connect(config("fence_test_storage", true))
        .await
        .expect("connect to DynamoDB");
    let client = storage.client().clone();
    DynamoDbFence::create_table(&client, "fence_test")
        .await
        .expect("create the fence tables");
    Arc::new(DynamoDbFence::new(client, "fence_test").expect("a valid table name"))
}

fence::suite!(
    make_fence,
    ignore = "needs DynamoDB: run `cargo xtask test-drivers`"
);

fn fresh_key(prefix: &str) -> Key {
    Key::new(format!("{prefix}/{:016x}", rand::random::<u64>())).unwrap()
}

fn secs(n: u64) -> Ttl {
    Ttl::from_secs(n).unwrap()
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn empty_and_largest_values_fit_an_item() {
    let s = make_storage().await;
    let key = fresh_key("bytes");
    // Empty values are Binary attributes of length zero, also in conditions.
    assert!(s.insert_if_not_exists(&key, b"", secs(30)).await.unwrap());
    assert!(s.compare_and_swap(&key, b"", b"", secs(30)).await.unwrap());
    assert!(s.compare_and_delete(&key, b"").await.unwrap());
    // The largest value, renewed (old and new in one request) and released.
    let big = vec![0xA5; ttl_storage::MAX_VALUE_LEN];
    assert!(s.insert_if_not_exists(&key, &big, secs(30)).await.unwrap());
    assert!(
        s.compare_and_swap(&key, &big, &big, secs(30))
            .await
            .unwrap()
    );
    assert_eq!(s.get(&key).await.unwrap(), Some(big.clone()));
    assert!(s.compare_and_delete(&key, &big).await.unwrap());
    assert_eq!(s.get(&key).await.unwrap(), None);
}

/// Wall-clock mode reports the time left (the writer's expiry against this
/// machine's clock); observed-lease mode cannot tell.
#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn entry_reports_the_time_left_in_wall_clock_mode() {
    let s = make_storage().await;
    let key = fresh_key("entry");
    elections_testsuite::assert_time_left_round_trip(
        &*s,
        &key,
        Duration::from_secs(19)..=Duration::from_secs(20),
    )
    .await;

    let observed = observed_storage().await;
    assert!(
        observed
            .insert_if_not_exists(&key, b"o", secs(20))
            .await
            .unwrap()
    );
    let entry = observed.get_entry(&key).await.unwrap().unwrap();
    assert_eq!(entry.time_left, TimeLeft::Unknown);
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn missing_table_without_create_is_a_clear_error() {
    let name = format!("missing_{:08x}", rand::random::<u32>());
    let err = DynamoDbStorage::connect(config(&name, false))
        .await
        .unwrap_err();
    assert!(
        matches!(&err, ConnectError::TableNotFound(t) if *t == name),
        "{err}"
    );
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn wrong_key_schema_is_rejected() {
    use aws_sdk_dynamodb::types::{
        AttributeDefinition, BillingMode, KeySchemaElement, KeyType, ScalarAttributeType,
    };
    let storage = DynamoDbStorage::connect(config(TABLE, true)).await.unwrap();
    let name = format!("wrong_{:08x}", rand::random::<u32>());
    storage
        .client()
        .create_table()
        .table_name(&name)
        .attribute_definitions(
            AttributeDefinition::builder()
                .attribute_name("id")
                .attribute_type(ScalarAttributeType::N)
                .build()
                .unwrap(),
        )
        .key_schema(
            KeySchemaElement::builder()
                .attribute_name("id")
                .key_type(KeyType::Hash)
                .build()
                .unwrap(),
        )
        .billing_mode(BillingMode::PayPerRequest)
        .send()
        .await
        .unwrap();
    let err = DynamoDbStorage::connect(config(&name, true))
        .await
        .unwrap_err();
    assert!(matches!(err, ConnectError::WrongSchema { .. }), "{err}");
    assert!(err.to_string().contains("HASH id N"), "{err}");
    storage
        .client()
        .delete_table()
        .table_name(&name)
        .send()
        .await
        .unwrap();
}

/// Prints the median latency of each operation (not an assertion on speed):
/// `cargo xtask test-drivers --engine dynamodb -- --nocapture op_latency`.
#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn op_latency_medians() {
    let s = make_storage().await;
    let mut samples: [Vec<Duration>; 4] = Default::default();
    // The first 100 rounds warm up the JVM's JIT and the connection pool.
    for round in 0..400 {
        if round == 100 {
            samples = Default::default();
        }
        let key = fresh_key("latency");
        let t = Instant::now();
        assert!(s.insert_if_not_exists(&key, b"me", secs(30)).await.unwrap());
        samples[0].push(t.elapsed());
        let t = Instant::now();
        assert!(
            s.compare_and_swap(&key, b"me", b"me", secs(30))
                .await
                .unwrap()
        );
        samples[1].push(t.elapsed());
        let t = Instant::now();
        assert_eq!(s.get(&key).await.unwrap(), Some(b"me".to_vec()));
        samples[2].push(t.elapsed());
        let t = Instant::now();
        assert!(s.compare_and_delete(&key, b"me").await.unwrap());
        samples[3].push(t.elapsed());
    }
    for (name, mut v) in ["insert (acquire)", "cas (renew)", "get", "cad (release)"]
        .into_iter()
        .zip(samples)
    {
        v.sort();
        println!("dynamodb median {name}: {:?}", v[v.len() / 2]);
    }
}

/// A storage in [`ExpiryMode::ObservedLease`] on its own table (modes must not share one).
async fn observed_storage() -> DynamoDbStorage {
    let config = builder("ttl_storage_observed", true)
        .expiry_mode(ExpiryMode::ObservedLease)
        .build()
        .unwrap();
    DynamoDbStorage::connect(config).await.unwrap()
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn observed_lease_basic_operations() {
    let s = observed_storage().await;
    let key = fresh_key("observed-basic");
    assert!(s.insert_if_not_exists(&key, b"", secs(30)).await.unwrap());
    assert!(!s.insert_if_not_exists(&key, b"b", secs(30)).await.unwrap());
    assert_eq!(s.get(&key).await.unwrap(), Some(vec![]));
    assert!(
        !s.compare_and_swap(&key, b"x", b"b", secs(30))
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_swap(&key, b"", b"b", Ttl::NEVER)
            .await
            .unwrap()
    );
    assert!(!s.compare_and_delete(&key, b"a").await.unwrap());
    assert!(s.compare_and_delete(&key, b"b").await.unwrap());
    assert_eq!(s.get(&key).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&key, b"c", secs(30)).await.unwrap());
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn observed_lease_expires_a_full_lease_after_each_observers_first_sighting() {
    let (a, b, c) = (
        observed_storage().await,
        observed_storage().await,
        observed_storage().await,
    );
    let key = fresh_key("observed-expiry");
    assert!(a.insert_if_not_exists(&key, b"a", secs(2)).await.unwrap());
    // B starts watching at once; C only a second later.
    assert!(!b.insert_if_not_exists(&key, b"b", secs(2)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1000)).await;
    assert_eq!(c.get(&key).await.unwrap(), Some(b"a".to_vec()));
    tokio::time::sleep(Duration::from_millis(1100)).await;
    // B has watched the same version for a full lease: expired for B.
    assert_eq!(b.get(&key).await.unwrap(), None);
    // C has not: for C the lease runs until a full lease after its first look.
    assert_eq!(c.get(&key).await.unwrap(), Some(b"a".to_vec()));
    // The holder's own lease ran out on its own clock: no renewal, no release.
    assert!(!a.compare_and_swap(&key, b"a", b"a", secs(2)).await.unwrap());
    assert!(!a.compare_and_delete(&key, b"a").await.unwrap());
    assert!(b.insert_if_not_exists(&key, b"b", secs(2)).await.unwrap());
    // The takeover wrote a new version: C must watch it from scratch.
    assert_eq!(c.get(&key).await.unwrap(), Some(b"b".to_vec()));
    assert!(!c.insert_if_not_exists(&key, b"c", secs(2)).await.unwrap());
}

#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn observed_lease_renewals_prevent_takeover() {
    let (holder, contender) = (observed_storage().await, observed_storage().await);
    let key = fresh_key("observed-renew");
    assert!(
        holder
            .insert_if_not_exists(&key, b"h", secs(1))
            .await
            .unwrap()
    );
    let until = Instant::now() + Duration::from_millis(2500);
    let mut last_renewal = Instant::now();
    while Instant::now() < until {
        assert!(
            !contender
                .insert_if_not_exists(&key, b"c", secs(1))
                .await
                .unwrap()
        );
        if last_renewal.elapsed() >= Duration::from_millis(300) {
            last_renewal = Instant::now();
            assert!(
                holder
                    .compare_and_swap(&key, b"h", b"h", secs(1))
                    .await
                    .unwrap()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // The holder stops renewing: the contender takes over about a lease later.
    let stopped = Instant::now();
    while !contender
        .insert_if_not_exists(&key, b"c", secs(1))
        .await
        .unwrap()
    {
        assert!(stopped.elapsed() < Duration::from_secs(5), "no takeover");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(last_renewal.elapsed() >= Duration::from_secs(1));
    assert!(
        !holder
            .compare_and_swap(&key, b"h", b"h", secs(1))
            .await
            .unwrap()
    );
    assert_eq!(holder.get(&key).await.unwrap(), Some(b"c".to_vec()));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn observed_lease_racing_takeovers_have_exactly_one_winner() {
    let mut contenders = Vec::new();
    for _ in 0..16 {
        contenders.push(Arc::new(observed_storage().await));
    }
    let key = fresh_key("observed-race");
    assert!(
        contenders[0]
            .insert_if_not_exists(&key, b"first", secs(1))
            .await
            .unwrap()
    );
    for round in 0..5 {
        // Everybody watches the current version (under load, some may
        // already have watched it for a full lease), then all race once it
        // expired for every one of them.
        for c in &contenders {
            c.get(&key).await.unwrap();
        }
        tokio::time::sleep(Duration::from_millis(1050)).await;
        let tasks: Vec<_> = contenders
            .iter()
            .enumerate()
            .map(|(i, c)| {
                let (c, key) = (c.clone(), key.clone());
                tokio::spawn(async move { c.insert_if_not_exists(&key, &[i as u8], secs(1)).await })
            })
            .collect();
        let mut winners = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            if task.await.unwrap().unwrap() {
                winners.push(i);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
    }
}

/// The whole shared suite again, in the clock-skew-independent mode: every
/// case uses one storage instance, whose own writes it times itself.
mod observed_lease {
    use std::sync::Arc;

    use ttl_storage::DynTtlStorage;

    async fn make_storage() -> DynTtlStorage {
        Arc::new(super::observed_storage().await)
    }

    elections_testsuite::testsuite!(
        real_time,
        make_storage,
        ignore = "needs DynamoDB: run `cargo xtask test-drivers`"
    );
}

/// A storage on `table` in `mode` whose requests go through `proxy`, with
/// a request timeout longer than the proxy's hold.
async fn through_proxy(
    proxy: std::net::SocketAddr,
    table: &str,
    mode: ExpiryMode,
) -> DynamoDbStorage {
    let config = builder(table, true)
        .endpoint(format!("http://{proxy}"))
        .request_timeout(Duration::from_secs(20))
        .expiry_mode(mode)
        .build()
        .unwrap();
    DynamoDbStorage::connect(config).await.unwrap()
}

/// The DynamoDB Local the suite talks to, for the proxy.
fn server_addr() -> std::net::SocketAddr {
    let endpoint = std::env::var("DYNAMODB_ENDPOINT").unwrap();
    let url = url::Url::parse(&endpoint).unwrap();
    let host = url.host_str().unwrap().trim_matches(['[', ']']).to_string();
    let port = url.port_or_known_default().unwrap();
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap()
        .next()
        .unwrap()
}

/// Issue 34, case 7: a renewal applied late never moves the expiry earlier
/// (wall-clock mode). The held renewal computed `exp_ms = now + TTL` before
/// the proxy held it; it lands after a renewal read its clock 2.5 s later
/// and was acknowledged. See the shared case.
#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = DynamoDbStorage::connect(config(TABLE, true)).await.unwrap();
    elections_testsuite::network::renewal_applied_late_never_moves_the_expiry_earlier(
        server_addr(),
        &direct,
        |proxy| through_proxy(proxy, TABLE, ExpiryMode::WallClock),
        &fresh_key("late-renewal"),
        0,
    )
    .await;
}

/// The same in observed-lease mode: a late write is a new version, so every
/// observer starts a full lease from the moment it sees it.
#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier_observed_lease() {
    let direct = observed_storage().await;
    elections_testsuite::network::renewal_applied_late_never_moves_the_expiry_earlier(
        server_addr(),
        &direct,
        |proxy| through_proxy(proxy, "ttl_storage_observed", ExpiryMode::ObservedLease),
        &fresh_key("late-renewal-observed"),
        0,
    )
    .await;
}

/// A swap that would shorten a record written after it read its clock is
/// refused: a renewal (`v -> v`) answers true and writes nothing (the
/// record already lives longer), a swap to another value is a transient
/// error until this clock passes the record's anchor. Written by hand: the record's `at_ms`
/// lies 3 s in the future, as a write anchored after this swap's would.
#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn a_swap_never_shortens_a_record_anchored_after_it() {
    use aws_sdk_dynamodb::{primitives::Blob, types::AttributeValue};
    let s = DynamoDbStorage::connect(config(TABLE, true)).await.unwrap();
    let key = fresh_key("anchored-later");
    let now_ms = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    let started = Instant::now();
    let (at, exp) = (now_ms + 3_000, now_ms + 3_000 + 10_000);
    s.client()
        .put_item()
        .table_name(TABLE)
        .item("pk", AttributeValue::S(key.as_str().to_string()))
        .item("val", AttributeValue::B(Blob::new(b"v".to_vec())))
        .item("at_ms", AttributeValue::N(at.to_string()))
        .item("exp_ms", AttributeValue::N(exp.to_string()))
        .item(
            "expires_at",
            AttributeValue::N((exp / 1000 + 1).to_string()),
        )
        .send()
        .await
        .unwrap();
    assert!(s.compare_and_swap(&key, b"v", b"v", secs(5)).await.unwrap());
    let entry = s.get_entry(&key).await.unwrap().unwrap();
    let TimeLeft::About(left) = entry.time_left else {
        panic!("{entry:?}")
    };
    assert!(
        left > Duration::from_secs(11),
        "the renewal shortened a record anchored after it: {left:?} left"
    );
    // To another value: refused (transient, after the driver's retries),
    // the record unchanged; once this clock has passed `at_ms`, written.
    let err = s
        .compare_and_swap(&key, b"v", b"w", secs(5))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ttl_storage::ErrorKind::Transient, "{err}");
    assert_eq!(s.get(&key).await.unwrap().as_deref(), Some(&b"v"[..]));
    tokio::time::sleep_until((started + Duration::from_millis(3_100)).into()).await;
    assert!(s.compare_and_swap(&key, b"v", b"w", secs(5)).await.unwrap());
    assert_eq!(s.get(&key).await.unwrap().as_deref(), Some(&b"w"[..]));
}

/// Connection failures said plainly (issue 37): a refused endpoint is
/// transient; an `https://` endpoint at DynamoDB Local's plaintext port is
/// permanent and says once that the server does not speak TLS. (DynamoDB
/// Local accepts any credentials, so a wrong secret key cannot be shown
/// here; on AWS it is the SDK's `UnrecognizedClientException`, permanent.)
mod connection {
    use elections_testsuite::network;
    use ttl_storage::StorageError;

    use super::*;

    async fn open(endpoint: String) -> Result<DynamoDbStorage, StorageError> {
        let config = DynamoDbConfig::builder("connection_case")
            .endpoint(endpoint)
            .region("us-east-1")
            .credentials("local", "local", None)
            .connect_timeout(Duration::from_secs(1))
            .build()
            .unwrap();
        DynamoDbStorage::connect(config)
            .await
            .map_err(|err| match err {
                ConnectError::Storage(err) => err,
                other => panic!("not a storage error: {other}"),
            })
    }

    #[tokio::test]
    async fn refused_endpoint_is_transient() {
        network::refused_connection_is_transient(|port| open(format!("http://127.0.0.1:{port}")))
            .await;
    }

    #[tokio::test]
    #[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
    async fn https_to_a_plaintext_endpoint_fails_plainly() {
        let plain = server_addr();
        let said = network::tls_to_a_plaintext_server_fails_plainly(
            open(format!("https://{plain}")),
            Duration::from_secs(20),
        )
        .await;
        assert!(said.contains(&plain.to_string()), "{said}");
    }
}
