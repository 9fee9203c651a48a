//! The driver against a real Cassandra or ScyllaDB named by `SCYLLA_URI`.
//!
//! Run with `cargo xtask test-drivers --engine cassandra`, which starts a
//! local Apache Cassandra and sets `SCYLLA_URI`; or point `SCYLLA_URI` at
//! your own cluster and run `cargo test -p storage-scylla --test suite -- --ignored`.

use std::{
    sync::Arc,
    time::{Duration, Instant},
};

use storage_scylla::ScyllaStorage;
use ttl_storage::{DynTtlStorage, Key, Ttl};

const NEEDS: &str = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`";

async fn make_storage() -> DynTtlStorage {
    let uri = std::env::var("SCYLLA_URI").unwrap_or_else(|_| {
        panic!(
            "SCYLLA_URI is not set: run `cargo xtask test-drivers --engine cassandra`, or set \
             SCYLLA_URI=scylla://host:9042/keyspace?replication=simple:1&create_schema=true"
        )
    });
    Arc::new(
        ScyllaStorage::from_url(&uri)
            .await
            .unwrap_or_else(|err| panic!("connecting to {uri}: {err:?}")),
    )
}

#[allow(clippy::unwrap_used)] // test helper: a bad key is a bug in the test
fn unique_key(name: &str) -> Key {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    Key::new(format!("smoke/{name}/{nanos}/{}", std::process::id())).unwrap()
}

#[allow(clippy::unwrap_used)] // test helper
fn secs(s: u64) -> Ttl {
    Ttl::from_secs(s).unwrap()
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn round_trip_of_all_operations() {
    let _ = NEEDS;
    let s = make_storage().await;
    let key = unique_key("round_trip");
    assert_eq!(s.get(&key).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&key, b"a", secs(30)).await.unwrap());
    assert!(!s.insert_if_not_exists(&key, b"b", secs(30)).await.unwrap());
    assert_eq!(s.get(&key).await.unwrap().as_deref(), Some(&b"a"[..]));
    assert!(
        !s.compare_and_swap(&key, b"x", b"c", secs(30))
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_swap(&key, b"a", b"c", secs(30))
            .await
            .unwrap()
    );
    assert_eq!(s.get(&key).await.unwrap().as_deref(), Some(&b"c"[..]));
    assert!(!s.compare_and_delete(&key, b"a").await.unwrap());
    assert!(s.compare_and_delete(&key, b"c").await.unwrap());
    assert_eq!(s.get(&key).await.unwrap(), None);
    assert!(
        !s.compare_and_swap(&key, b"c", b"d", secs(30))
            .await
            .unwrap()
    );
    assert!(s.insert_if_not_exists(&key, b"e", secs(30)).await.unwrap());
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn empty_and_binary_values_round_trip() {
    let s = make_storage().await;
    let key = unique_key("empty");
    assert!(s.insert_if_not_exists(&key, b"", secs(30)).await.unwrap());
    assert_eq!(s.get(&key).await.unwrap(), Some(vec![]));
    assert!(!s.insert_if_not_exists(&key, b"x", secs(30)).await.unwrap());
    let binary = [0u8, 255, 0, 1];
    assert!(
        s.compare_and_swap(&key, b"", &binary, secs(30))
            .await
            .unwrap()
    );
    assert_eq!(s.get(&key).await.unwrap(), Some(binary.to_vec()));
    assert!(s.compare_and_delete(&key, &binary).await.unwrap());
    assert_eq!(s.get(&key).await.unwrap(), None);
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn records_expire_within_the_bound() {
    let s = make_storage().await;
    let key = unique_key("expire");
    let written = Instant::now();
    assert!(s.insert_if_not_exists(&key, b"v", secs(1)).await.unwrap());
    // Live for at least the TTL after the write returned...
    while written.elapsed() < Duration::from_millis(900) {
        assert_eq!(s.get(&key).await.unwrap().as_deref(), Some(&b"v"[..]));
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // ...and gone at most 1 s after it (plus the write's own latency).
    tokio::time::sleep_until((written + Duration::from_millis(2100)).into()).await;
    assert_eq!(s.get(&key).await.unwrap(), None);
    assert!(!s.compare_and_swap(&key, b"v", b"w", secs(5)).await.unwrap());
    assert!(!s.compare_and_delete(&key, b"v").await.unwrap());
    assert!(s.insert_if_not_exists(&key, b"n", secs(5)).await.unwrap());
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn swap_restarts_the_ttl_even_when_shorter() {
    let s = make_storage().await;
    let key = unique_key("shorter");
    assert!(
        s.insert_if_not_exists(&key, b"v", Ttl::NEVER)
            .await
            .unwrap()
    );
    assert!(s.compare_and_swap(&key, b"v", b"w", secs(1)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(2200)).await;
    assert_eq!(s.get(&key).await.unwrap(), None);
    assert!(s.insert_if_not_exists(&key, b"x", secs(5)).await.unwrap());
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn never_expiring_records_stay() {
    let s = make_storage().await;
    let key = unique_key("never");
    assert!(
        s.insert_if_not_exists(&key, b"1", Ttl::NEVER)
            .await
            .unwrap()
    );
    assert!(
        s.compare_and_swap(&key, b"1", b"2", Ttl::NEVER)
            .await
            .unwrap()
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    assert_eq!(s.get(&key).await.unwrap().as_deref(), Some(&b"2"[..]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn racing_inserts_have_one_winner() {
    let s = make_storage().await;
    for round in 0..10 {
        let key = unique_key(&format!("race{round}"));
        let tasks: Vec<_> = (0..16u8)
            .map(|i| {
                let s = s.clone();
                let key = key.clone();
                tokio::spawn(async move { s.insert_if_not_exists(&key, &[i], secs(30)).await })
            })
            .collect();
        let mut winners = Vec::new();
        for (i, task) in tasks.into_iter().enumerate() {
            if task.await.unwrap().unwrap() {
                winners.push(i as u8);
            }
        }
        assert_eq!(winners.len(), 1, "round {round}: winners {winners:?}");
        assert_eq!(s.get(&key).await.unwrap(), Some(vec![winners[0]]));
    }
}

#[tokio::test]
#[ignore = "needs Cassandra/ScyllaDB: run `cargo xtask test-drivers`"]
async fn wrong_schema_is_a_permanent_error() {
    let uri = std::env::var("SCYLLA_URI").expect("SCYLLA_URI");
    let base = uri.split('?').next().unwrap();
    let err = ScyllaStorage::from_url(&format!("{base}?table=no_such_table_here"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ttl_storage::ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");
}
