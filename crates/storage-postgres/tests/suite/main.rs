//! The shared `elections-testsuite`, plus this driver's own cases, against a
//! real PostgreSQL named by `POSTGRES_URL`.
//!
//! Run with `cargo xtask test-drivers --engine postgres`, which starts a
//! local PostgreSQL (password authentication over TCP, TLS) and sets
//! `POSTGRES_URL` and `POSTGRES_TLS_URL`; or point them at your own
//! database (the cases create tables named `ttl_records` and `suite_*`):
//!
//! ```text
//! POSTGRES_URL=postgres://postgres:secret@127.0.0.1:5432/postgres \
//! POSTGRES_TLS_URL='postgres://postgres:secret@localhost/postgres?sslmode=verify-full&sslrootcert=/ca.pem' \
//!     cargo test -p storage-postgres --test suite -- --ignored --test-threads 16
//! ```

// Test code: a panic with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

mod connection;
mod fencing;
mod read_only;
mod watch;

use std::{net::SocketAddr, sync::Arc, time::Duration};

use elections_testsuite::network;
use storage_postgres::PostgresStorage;
use ttl_storage::{DynTtlStorage, ErrorKind, Key, Ttl, TtlStorage};

fn base_url() -> String {
    network::env_url(
        "POSTGRES_URL",
        "postgres",
        "postgres://user:password@host:5432/db",
    )
}

/// `POSTGRES_URL` with only its first server (a multi-host URL, as
/// `postgres-ha` sets, lists the current primary first).
fn first_server_url() -> String {
    let url = base_url();
    let (scheme, rest) = url.split_once("://").unwrap();
    let end = rest.find(['/', '?']).unwrap_or(rest.len());
    let (authority, tail) = rest.split_at(end);
    let (userinfo, hosts) = authority.split_at(authority.rfind('@').map_or(0, |at| at + 1));
    let first = hosts.split(',').next().unwrap();
    format!("{scheme}://{userinfo}{first}{tail}")
}

/// `POSTGRES_URL`'s first server changed by `edit`.
fn url_with(edit: impl FnOnce(&mut url::Url)) -> String {
    let mut url = url::Url::parse(&first_server_url()).unwrap();
    edit(&mut url);
    url.to_string()
}

fn with_query(query: &str) -> String {
    url_with(|u| u.set_query(Some(query)))
}

fn server_addr() -> SocketAddr {
    network::server_addr(&first_server_url(), 5432)
}

fn unique(name: &str) -> String {
    network::unique(name, "_")
}

async fn connect_url(url: &str) -> PostgresStorage {
    match PostgresStorage::from_url(url).await {
        Ok(storage) => storage,
        Err(err) => panic!("connecting to {url}: {err:?}"),
    }
}

async fn make_fence() -> fence::DynFence {
    // A pool of two (the racing cases still race): SCRAM logins are
    // CPU-heavy in debug builds, and a burst of them slows the cases that
    // start beside these (`lost_answers_and_lost_connections` connects
    // with a 1 s timeout).
    let base = base_url();
    let separator = if base.contains('?') { '&' } else { '?' };
    let s = connect_url(&format!("{base}{separator}pool_size=2")).await;
    match storage_postgres::fence::PostgresFence::create(&s, "suite_fences").await {
        Ok(fence) => Arc::new(fence),
        Err(err) => panic!("creating the fence tables: {err:?}"),
    }
}

fence::suite!(
    make_fence,
    ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"
);

async fn make_storage() -> DynTtlStorage {
    // Every server of a multi-host URL (postgres-ha): the shared suite goes
    // through the driver's choice of the writable one.
    let base = base_url();
    let separator = if base.contains('?') { '&' } else { '?' };
    let url = format!("{base}{separator}pool_size=4");
    let storage = connect_url(&url).await;
    warm_up(&storage).await;
    Arc::new(storage)
}

/// Opens every pooled connection before the case starts. SCRAM logins are
/// CPU-heavy in debug builds; on a loaded machine a login inside a case
/// could eat the elections' per-call timeout (d/4), which is meant to
/// measure operations, as on a warm production pool.
///
/// A warm-up login that fails is tried again, twice at most: PgBouncer,
/// under a burst of SCRAM logins, once answered one out of order
/// (tokio-postgres' `UnexpectedMessage`), failing a case before it began.
/// The cases' own connections are never retried here.
async fn warm_up(storage: &PostgresStorage) {
    let logins: Vec<_> = (0..storage.config().pool_size())
        .map(|_| {
            let pool = storage.pool().clone();
            tokio::spawn(async move {
                let mut tries = 0;
                loop {
                    tries += 1;
                    match pool.get().await {
                        Ok(client) => return client,
                        Err(err) if tries < 3 => {
                            eprintln!("warm-up login failed ({err:?}); trying again");
                        }
                        Err(err) => panic!("warm-up login failed {tries} times: {err:?}"),
                    }
                }
            })
        })
        .collect();
    let mut held = Vec::new();
    for login in logins {
        held.push(login.await.unwrap());
    }
}

elections_testsuite::testsuite!(
    real_time,
    make_storage,
    watch = required,
    ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"
);

fn key(name: &str) -> Key {
    Key::new(format!("postgres-driver/{}", unique(name))).unwrap()
}

fn ttl(secs: u64) -> Ttl {
    Ttl::from_secs(secs).unwrap()
}

/// `expires_at` is computed by the server (`now() + ttl`), NULL for
/// `Ttl::NEVER`, and a swap replaces it.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn expiry_is_computed_by_the_server() {
    let s = connect_url(&base_url()).await;
    let k = key("expiry");
    let remaining = |s: &PostgresStorage, k: &Key| {
        let pool = s.pool().clone();
        let table = s.config().qualified_table();
        let k = k.as_str().to_string();
        async move {
            let client = pool.get().await.unwrap();
            let row = client
                .query_one(
                    &format!(
                        "SELECT extract(epoch FROM expires_at - now())::float8 FROM {table} WHERE key = $1"
                    ),
                    &[&k],
                )
                .await
                .unwrap();
            row.get::<_, Option<f64>>(0)
        }
    };
    let engine_left = || async {
        // a row past its expiry reads as "none left", not as negative
        remaining(&s, &k)
            .await
            .map(|left| Duration::from_secs_f64(left.max(0.0)))
    };
    elections_testsuite::assert_engine_expiry_follows_ttl(
        &s,
        &k,
        engine_left,
        Duration::from_secs(19)..=Duration::from_secs(20),
        Duration::from_millis(1_200),
    )
    .await;
}

/// A swap that waited for another writer's row lock counts its expiry from
/// when it wrote the row, not from its statement's start (`now()`), so it
/// cannot land with an expiry anchored before the writer it waited for
/// (issue 34, case 7, on PostgreSQL). Another transaction holds the row
/// for 2 s while the swap waits.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn a_swap_that_waited_for_a_row_lock_counts_its_expiry_from_the_write() {
    let s = connect_url(&base_url()).await;
    let k = key("lock-wait");
    let table = s.config().qualified_table();
    assert!(s.insert_if_not_exists(&k, b"v", ttl(5)).await.unwrap());
    let (client, connection) = tokio_postgres::connect(&base_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(connection);
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute(
            &format!("UPDATE {table} SET value = value WHERE key = $1"),
            &[&k.as_str()],
        )
        .await
        .unwrap();
    let swap = s.compare_and_swap(&k, b"v", b"v", ttl(5));
    let commit = async {
        tokio::time::sleep(Duration::from_secs(2)).await;
        client.batch_execute("COMMIT").await.unwrap();
    };
    let (swapped, ()) = tokio::join!(swap, commit);
    assert!(swapped.unwrap());
    elections_testsuite::assert_entry_time_left(
        &s,
        &k,
        b"v",
        Duration::from_millis(4_500)..=Duration::from_secs(5),
    )
    .await;
}

/// Many processes creating the same table at once all succeed.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn concurrent_table_creation() {
    let table = unique("suite_concurrent");
    let url = with_query(&format!(
        "table={table}&schema=suite_schema&pool_size=1&connect_timeout=60s"
    ));
    let connects: Vec<_> = (0..8)
        .map(|_| {
            let url = url.clone();
            tokio::spawn(async move { PostgresStorage::from_url(&url).await })
        })
        .collect();
    for connect in connects {
        let storage = connect.await.unwrap().unwrap();
        assert_eq!(
            storage.config().qualified_table(),
            format!("suite_schema.{table}")
        );
    }
    let s = connect_url(&url).await;
    let k = key("created");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(5)).await.unwrap());
}

/// Without `create_table`, a missing table is a permanent error; a table
/// of the wrong shape is refused.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn missing_or_wrong_table_is_permanent() {
    let missing = unique("suite_missing");
    let err =
        PostgresStorage::from_url(&with_query(&format!("table={missing}&create_table=false")))
            .await
            .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("does not exist"), "{err}");

    let good = connect_url(&base_url()).await;
    let wrong = unique("suite_wrong");
    let client = good.pool().get().await.unwrap();
    client
        .batch_execute(&format!(
            "CREATE TABLE {wrong} (key text PRIMARY KEY, value text)"
        ))
        .await
        .unwrap();
    let err = PostgresStorage::from_url(&with_query(&format!("table={wrong}")))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("wrong schema"), "{err}");
}

/// What the server says of its replication matches how it was set up:
/// `POSTGRES_STANDBYS` (set by `cargo xtask test-drivers`; 0 when unset)
/// standbys stream from it, and with any standby, commits wait for one
/// (the `postgres-ha` engine runs synchronous replication), so the
/// driver's failover warning stays silent.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn replication_matches_the_setup() {
    let expected: u32 = std::env::var("POSTGRES_STANDBYS")
        .map(|v| v.parse().unwrap())
        .unwrap_or(0);
    let s = storage_postgres::PostgresStorage::from_url(&base_url())
        .await
        .unwrap();
    let mut replication = s.replication().await.unwrap();
    // A standby may still be (re)connecting right after start or failover.
    for _ in 0..50 {
        if replication.standbys == expected {
            break;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        replication = s.replication().await.unwrap();
    }
    assert_eq!(replication.standbys, expected, "{replication:?}");
    assert!(!replication.failover_can_lose_writes(), "{replication:?}");
}

/// The take-over and its fencing token are one statement (issue 38): a
/// counted write is `Written`, never `Unsupported`; sixteen counted writes
/// of sixteen records racing on one counter take sixteen distinct numbers
/// (the counter advances under its row lock, from the latest committed
/// value, not from the statement's snapshot).
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn counted_writes_are_one_statement_and_never_share_a_number() {
    use ttl_storage::{Counted, CountedWrite};
    let s = Arc::new(connect_url(&base_url()).await);
    let counter = key("counted-counter");
    let writes: Vec<_> = (0..16)
        .map(|i| {
            let (s, counter) = (s.clone(), counter.clone());
            tokio::spawn(async move {
                let record = key(&format!("counted-{i}"));
                s.write_counted(CountedWrite {
                    key: &record,
                    expected: None,
                    value: b"v",
                    ttl: ttl(20),
                    counter: &counter,
                    floor: 1,
                    max: u64::MAX,
                })
                .await
            })
        })
        .collect();
    let mut numbers = Vec::new();
    for write in writes {
        match write.await.unwrap().unwrap() {
            Counted::Written(n) => numbers.push(n),
            other => panic!("a counted write answered {other:?}"),
        }
    }
    numbers.sort_unstable();
    assert_eq!(numbers, (1..=16).collect::<Vec<u64>>());
    assert_eq!(s.get(&counter).await.unwrap().as_deref(), Some(&b"16"[..]));
}
