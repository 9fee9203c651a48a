//! Error mapping end to end through the real SDK stack, against a tiny fake
//! DynamoDB that describes a valid table and then misbehaves on item
//! requests (hangs, answers 500, throttles). Needs no server.

// Test helpers outside #[test] functions panic on purpose.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::{
    io::{BufRead, BufReader, Read, Write},
    net::{TcpListener, TcpStream},
    sync::{
        Arc,
        atomic::{AtomicUsize, Ordering},
    },
    time::Duration,
};

use storage_dynamodb::{ConnectError, DynamoDbConfig, DynamoDbStorage};
use ttl_storage::{ErrorKind, Key, Ttl, TtlStorage};

/// What the fake does with PutItem, DeleteItem and GetItem.
#[derive(Clone, Copy)]
enum Behaviour {
    /// Reads the request and never answers.
    Hang,
    /// 500 InternalServerError.
    InternalError,
    /// 400 ProvisionedThroughputExceededException.
    Throttle,
    /// No table: DescribeTable answers ResourceNotFoundException; every
    /// other request (CreateTable included) is counted and refused.
    NoTable,
}

struct Fake {
    endpoint: String,
    item_requests: Arc<AtomicUsize>,
}

fn start(behaviour: Behaviour) -> Fake {
    let listener = TcpListener::bind("127.0.0.1:0").unwrap();
    let endpoint = format!("http://{}", listener.local_addr().unwrap());
    let item_requests = Arc::new(AtomicUsize::new(0));
    let counter = item_requests.clone();
    std::thread::spawn(move || {
        for stream in listener.incoming().flatten() {
            let counter = counter.clone();
            std::thread::spawn(move || serve(stream, behaviour, &counter));
        }
    });
    Fake {
        endpoint,
        item_requests,
    }
}

/// Serves one keep-alive connection until the client closes it.
fn serve(stream: TcpStream, behaviour: Behaviour, item_requests: &AtomicUsize) {
    let mut writer = stream.try_clone().unwrap();
    let mut reader = BufReader::new(stream);
    loop {
        let mut target = String::new();
        let mut length = 0usize;
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line).unwrap_or(0) == 0 {
                return;
            }
            let line = line.trim_end();
            if line.is_empty() {
                break;
            }
            let lower = line.to_ascii_lowercase();
            if let Some(v) = lower.strip_prefix("x-amz-target:") {
                target = v.trim().to_string();
            } else if let Some(v) = lower.strip_prefix("content-length:") {
                length = v.trim().parse().unwrap();
            }
        }
        let mut body = vec![0; length];
        reader.read_exact(&mut body).unwrap();
        let operation = target.rsplit('.').next().unwrap_or_default();
        let (status, json) = match operation {
            "describetable" if matches!(behaviour, Behaviour::NoTable) => (
                "400 Bad Request",
                r#"{"__type":"com.amazonaws.dynamodb.v20120810#ResourceNotFoundException","message":"Requested resource not found"}"#,
            ),
            "describetable" => (
                "200 OK",
                r#"{"Table":{"TableName":"fake_table","TableStatus":"ACTIVE","KeySchema":[{"AttributeName":"pk","KeyType":"HASH"}],"AttributeDefinitions":[{"AttributeName":"pk","AttributeType":"S"}]}}"#,
            ),
            "describetimetolive" => (
                "200 OK",
                r#"{"TimeToLiveDescription":{"TimeToLiveStatus":"ENABLED","AttributeName":"expires_at"}}"#,
            ),
            _ => {
                item_requests.fetch_add(1, Ordering::SeqCst);
                match behaviour {
                    Behaviour::Hang => {
                        std::thread::sleep(Duration::from_secs(30));
                        return;
                    }
                    Behaviour::InternalError | Behaviour::NoTable => (
                        "500 Internal Server Error",
                        r#"{"__type":"com.amazonaws.dynamodb.v20120810#InternalServerError","message":"boom"}"#,
                    ),
                    Behaviour::Throttle => (
                        "400 Bad Request",
                        r#"{"__type":"com.amazonaws.dynamodb.v20120810#ProvisionedThroughputExceededException","message":"slow down"}"#,
                    ),
                }
            }
        };
        let response = format!(
            "HTTP/1.1 {status}\r\nContent-Type: application/x-amz-json-1.0\r\nContent-Length: {}\r\n\r\n{json}",
            json.len()
        );
        if writer.write_all(response.as_bytes()).is_err() {
            return;
        }
    }
}

async fn connect(fake: &Fake, attempts: u32) -> DynamoDbStorage {
    let config = DynamoDbConfig::builder("fake_table")
        .endpoint(&fake.endpoint)
        .region("us-east-1")
        .credentials("fake", "fake", None)
        .request_timeout(Duration::from_millis(300))
        .max_attempts(attempts)
        .build()
        .unwrap();
    DynamoDbStorage::connect(config).await.unwrap()
}

fn key() -> Key {
    Key::new("k").unwrap()
}

#[tokio::test]
async fn a_conditional_write_that_times_out_is_outcome_unknown_and_not_retried() {
    let fake = start(Behaviour::Hang);
    let s = connect(&fake, 3).await;
    let ttl = Ttl::from_secs(5).unwrap();
    let err = s.insert_if_not_exists(&key(), b"v", ttl).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err:?}");
    let err = s
        .compare_and_swap(&key(), b"v", b"w", ttl)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err:?}");
    let err = s.compare_and_delete(&key(), b"v").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err:?}");
    // One request each: neither the SDK nor the driver retried.
    assert_eq!(fake.item_requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn a_read_that_times_out_is_transient() {
    let fake = start(Behaviour::Hang);
    let s = connect(&fake, 2).await;
    let err = s.get(&key()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err:?}");
    // Reads are safe to retry: max_attempts requests.
    assert_eq!(fake.item_requests.load(Ordering::SeqCst), 2);
}

#[tokio::test]
async fn internal_error_is_unknown_for_writes_and_transient_for_reads() {
    let fake = start(Behaviour::InternalError);
    let s = connect(&fake, 1).await;
    let err = s
        .insert_if_not_exists(&key(), b"v", Ttl::NEVER)
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::OutcomeUnknown, "{err:?}");
    let err = s.get(&key()).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err:?}");
}

#[tokio::test]
async fn throttling_is_transient_and_retried_up_to_max_attempts() {
    let fake = start(Behaviour::Throttle);
    let s = connect(&fake, 3).await;
    let err = s.compare_and_delete(&key(), b"v").await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err:?}");
    assert!(
        err.to_string().contains("ProvisionedThroughputExceeded"),
        "{err}"
    );
    assert_eq!(fake.item_requests.load(Ordering::SeqCst), 3);
}

#[tokio::test]
async fn unreachable_endpoint_is_transient() {
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let config = DynamoDbConfig::builder("fake_table")
        .endpoint(format!("http://127.0.0.1:{port}"))
        .region("us-east-1")
        .credentials("fake", "fake", None)
        .max_attempts(1)
        .build()
        .unwrap();
    match DynamoDbStorage::connect(config).await.unwrap_err() {
        ConnectError::Storage(e) => assert!(e.is_transient(), "{e:?}"),
        other => panic!("expected a transient storage error, got {other}"),
    }
}

/// The read-only open (`open_existing`, what `vvm-host status` uses) on a
/// missing table is `NoStore`, and sends nothing but its DescribeTable:
/// no CreateTable, no TTL change.
#[tokio::test]
async fn open_existing_on_a_missing_table_is_no_store_and_creates_nothing() {
    let fake = start(Behaviour::NoTable);
    let config = DynamoDbConfig::builder("fake_table")
        .endpoint(&fake.endpoint)
        .region("us-east-1")
        .credentials("fake", "fake", None)
        .request_timeout(Duration::from_millis(300))
        .build()
        .unwrap();
    let err = ttl_storage::DriverConfig::open_existing(config)
        .await
        .err()
        .expect("opened a table that is not there");
    assert!(ttl_storage::NoStore::find(&*err).is_some(), "{err}");
    assert_eq!(
        fake.item_requests.load(Ordering::SeqCst),
        0,
        "a request other than DescribeTable was sent"
    );
}
