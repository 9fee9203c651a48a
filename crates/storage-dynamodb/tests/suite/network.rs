//! The network cases: requests through a fault proxy (a lost answer, a
//! renewal applied late, a swap that would shorten a later record) and
//! connection failures said plainly.

use super::*;

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

/// A conditional write whose answer is lost (the proxy swallows it) is
/// `OutcomeUnknown`, never a guess, and it did land; a read through the
/// same proxy is then transient (the shared network case).
#[tokio::test]
#[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
async fn lost_answer_of_a_write_is_outcome_unknown() {
    let proxy = elections_testsuite::network::proxy_to(server_addr()).await;
    let proxied = builder(TABLE, true)
        .endpoint(format!("http://{}", proxy.addr))
        .request_timeout(Duration::from_secs(2))
        .build()
        .unwrap();
    let s = DynamoDbStorage::connect(proxied).await.unwrap();
    let direct = DynamoDbStorage::connect(config(TABLE, true)).await.unwrap();
    let key = fresh_key("lost");
    assert!(s.insert_if_not_exists(&key, b"a", secs(60)).await.unwrap());
    elections_testsuite::network::lost_answer_of_a_write_is_outcome_unknown(
        &s,
        &direct,
        &proxy,
        &key,
        secs(60),
        true,
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
/// permanent and says once that the server does not speak TLS; credentials
/// the server does not recognise are permanent, said once. (DynamoDB Local
/// checks no secret key, but it refuses an access key id that is not
/// letters and digits, as AWS refuses an unknown one: the same
/// `UnrecognizedClientException`.)
mod connection {
    use elections_testsuite::network;
    use ttl_storage::{ErrorKind, StorageError};

    use super::*;

    async fn open(endpoint: String) -> Result<DynamoDbStorage, StorageError> {
        open_as(endpoint, "local").await
    }

    async fn open_as(endpoint: String, key_id: &str) -> Result<DynamoDbStorage, StorageError> {
        let config = DynamoDbConfig::builder("connection_case")
            .endpoint(endpoint)
            .region("us-east-1")
            .credentials(key_id, "hunter2-secret", None)
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

    #[tokio::test]
    #[ignore = "needs DynamoDB: run `cargo xtask test-drivers`"]
    async fn unrecognised_credentials_are_permanent() {
        let Err(err) = tokio::time::timeout(
            Duration::from_secs(30),
            open_as(format!("http://{}", server_addr()), "not-a-key-id!"),
        )
        .await
        .expect("refused credentials are answered, not waited out") else {
            panic!("connected with credentials the server refuses");
        };
        assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
        assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
        // The server's code and its words, once.
        let said = err.to_string();
        assert_eq!(
            said.matches("UnrecognizedClientException").count(),
            1,
            "{said}"
        );
        assert_eq!(said.matches("is invalid").count(), 1, "{said}");
    }
}
