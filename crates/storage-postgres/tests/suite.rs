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

use std::{
    net::SocketAddr,
    sync::Arc,
    time::{Duration, SystemTime, UNIX_EPOCH},
};

use elections_testsuite::network;
use storage_postgres::PostgresStorage;
use ttl_storage::{DynTtlStorage, ErrorKind, Key, TimeLeft, Ttl, TtlStorage};

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
    let url = url::Url::parse(&first_server_url()).unwrap();
    let host = url.host_str().unwrap().trim_matches(['[', ']']).to_string();
    let port = url.port().unwrap_or(5432);
    std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), port))
        .unwrap()
        .next()
        .unwrap()
}

fn unique(name: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("{name}_{nanos}")
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
async fn warm_up(storage: &PostgresStorage) {
    let logins: Vec<_> = (0..storage.config().pool_size())
        .map(|_| {
            let pool = storage.pool().clone();
            tokio::spawn(async move { pool.get().await })
        })
        .collect();
    let mut held = Vec::new();
    for login in logins {
        held.push(login.await.unwrap().unwrap());
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
    assert!(s.insert_if_not_exists(&k, b"v", ttl(20)).await.unwrap());
    let left = remaining(&s, &k).await.unwrap();
    assert!((19.0..=20.0).contains(&left), "{left}");
    // get_entry reports the same server-side figure.
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
    assert_eq!(remaining(&s, &k).await, None);
    let entry = s.get_entry(&k).await.unwrap().unwrap();
    assert_eq!(entry.time_left, TimeLeft::Never);
    assert!(s.compare_and_swap(&k, b"w", b"x", ttl(1)).await.unwrap());
    tokio::time::sleep(Duration::from_millis(1_200)).await;
    assert_eq!(s.get(&k).await.unwrap(), None);
    assert!(!s.compare_and_delete(&k, b"x").await.unwrap());
    assert!(s.insert_if_not_exists(&k, b"y", ttl(5)).await.unwrap());
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
    let left = s.get_entry(&k).await.unwrap().unwrap();
    elections_testsuite::assert_time_left(
        &left,
        b"v",
        Duration::from_millis(4_500)..=Duration::from_secs(5),
    );
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

/// A wrong password is a permanent error that does not show the password.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn wrong_password_is_permanent() {
    let url = url_with(|u| u.set_password(Some("hunter2")).unwrap());
    let err = PostgresStorage::from_url(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!format!("{err} {err:?}").contains("hunter2"), "{err:?}");
}

/// `sslmode=require` against a server without TLS fails; it never falls
/// back to plaintext.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn require_tls_against_plaintext_server_fails() {
    let err = PostgresStorage::from_url(&with_query("sslmode=require"))
        .await
        .unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
}

fn tls_url() -> String {
    std::env::var("POSTGRES_TLS_URL").unwrap_or_else(|_| {
        panic!(
            "POSTGRES_TLS_URL is not set: `cargo xtask test-drivers --engine postgres` sets it; \
             with your own server set POSTGRES_TLS_URL=postgres://...?sslmode=verify-full&sslrootcert=/path/ca.pem"
        )
    })
}

/// With `sslmode=verify-full` and the server's CA every operation works,
/// and the session is encrypted; with another CA the connection is refused.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn tls_round_trip_and_certificate_check() {
    let s = connect_url(&tls_url()).await;
    let other_ca = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/data/ca.pem");
    let mut wrong = url::Url::parse(&tls_url()).unwrap();
    wrong.set_query(Some(&format!("sslmode=verify-full&sslrootcert={other_ca}")));
    let wrong_ca = PostgresStorage::from_url(wrong.as_str());
    network::tls_round_trip_and_certificate_check(&s, &key("tls"), wrong_ca).await;
    let client = s.pool().get().await.unwrap();
    let row = client
        .query_one(
            "SELECT ssl FROM pg_stat_ssl WHERE pid = pg_backend_pid()",
            &[],
        )
        .await
        .unwrap();
    assert!(row.get::<_, bool>(0), "the session is not encrypted");
}

/// On the wire: with `sslmode=verify-full` the client's first message is
/// an SSLRequest, and a server that answers "no TLS" ends the attempt —
/// no startup message (which would carry the user name) follows.
#[tokio::test]
async fn ssl_request_first_and_no_plaintext_fallback() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut conn, _) = listener.accept().await.unwrap();
        let mut request = [0u8; 8];
        conn.read_exact(&mut request).await.unwrap();
        conn.write_all(b"N").await.unwrap();
        let mut rest = Vec::new();
        let _ = tokio::time::timeout(Duration::from_secs(2), conn.read_to_end(&mut rest)).await;
        (request, rest)
    });
    let url =
        format!("postgres://app:secret@127.0.0.1:{port}/db?sslmode=verify-full&connect_timeout=2s");
    let err = PostgresStorage::from_url(&url).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(!err.to_string().contains("secret"), "{err}");
    let (request, rest) = server.await.unwrap();
    // Length 8, then the SSLRequest code 80877103.
    assert_eq!(request, [0, 0, 0, 8, 4, 210, 22, 47]);
    assert!(
        rest.is_empty(),
        "sent {} bytes after refusing TLS",
        rest.len()
    );
}

/// A server that refuses connections is a transient error at connect time.
#[tokio::test]
async fn refused_connection_is_transient() {
    network::refused_connection_is_transient(|port| async move {
        PostgresStorage::from_url(&format!("postgres://u@127.0.0.1:{port}/db")).await
    })
    .await;
}

/// A write whose answer is lost is outcome unknown (and here it was in
/// fact applied); a read in the same situation is transient; once the
/// server cannot be reached, operations are transient.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn lost_answers_and_lost_connections() {
    let direct = connect_url(&base_url()).await;
    let proxy = elections_testsuite::proxy::Proxy::start(server_addr())
        .await
        .unwrap();
    let url = url_with(|u| {
        u.set_port(Some(proxy.addr.port())).unwrap();
        u.set_query(Some("timeout=1s&connect_timeout=1s&pool_size=1"));
    });
    let s = connect_url(&url).await;
    let k = key("lost");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    // Prepare the swap's statement on the one pooled connection first: a
    // lost answer while preparing is (rightly) transient, not unknown.
    assert!(s.compare_and_swap(&k, b"a", b"a", ttl(30)).await.unwrap());
    network::lost_answer_of_a_write_is_outcome_unknown(&s, &direct, &proxy, &k, ttl(30), false)
        .await;

    proxy.shut_down();
    // The pooled connection is gone and new ones are refused.
    let err = network::transient_once_gone(|| s.compare_and_delete(&k, b"b")).await;
    assert!(err.to_string().contains("connect"), "{err}");
    let err = s.get(&k).await.unwrap_err();
    assert_eq!(err.kind(), ErrorKind::Transient, "{err}");
    assert_eq!(direct.get(&k).await.unwrap().as_deref(), Some(&b"b"[..]));
}

/// Issue 34, case 7 (the shared case): a renewal held 2.5 s on its way
/// lands after a later one was acknowledged; its expiry counts from when
/// the server writes the row, so it can only lengthen the lease.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn renewal_applied_late_never_moves_the_expiry_earlier() {
    let direct = connect_url(&base_url()).await;
    let proxy = elections_testsuite::proxy::Proxy::start(server_addr())
        .await
        .unwrap();
    let url = url_with(|u| {
        u.set_port(Some(proxy.addr.port())).unwrap();
        // connect_timeout: how long connecting waits for the listener.
        u.set_query(Some("timeout=20s&connect_timeout=1s&pool_size=1"));
    });
    let held = connect_url(&url).await;
    network::renewal_applied_late_never_moves_the_expiry_earlier(
        &held,
        &direct,
        &proxy,
        &key("late-renewal"),
        0,
    )
    .await;
}

/// The fence refuses transactions with a token lower than the highest
/// recorded, and serializes fenced transactions on one resource: a lower
/// token that waited for a higher one's commit is refused.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn fence_refuses_lower_tokens() {
    use storage_postgres::fence::PostgresFence;
    let s = connect_url(&base_url()).await;
    let fence = PostgresFence::create(&s, "suite_fences").await.unwrap();
    let resource = unique("resource");
    let setup = s.pool().get().await.unwrap();
    setup
        .batch_execute("CREATE TABLE IF NOT EXISTS suite_fenced (id text PRIMARY KEY, v text)")
        .await
        .unwrap();
    let write = |token: u64, value: &'static str| {
        let (pool, fence, resource) = (s.pool().clone(), fence.clone(), resource.clone());
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            if !fence.check(&tx, &resource, token).await.unwrap() {
                return false;
            }
            tx.execute(
                "INSERT INTO suite_fenced (id, v) VALUES ($1, $2) \
                 ON CONFLICT (id) DO UPDATE SET v = EXCLUDED.v",
                &[&resource, &value],
            )
            .await
            .unwrap();
            tx.commit().await.unwrap();
            true
        }
    };
    let read = || async {
        let row = setup
            .query_one("SELECT v FROM suite_fenced WHERE id = $1", &[&resource])
            .await
            .unwrap();
        row.get::<_, String>(0)
    };
    assert!(write(5, "five").await);
    assert!(!write(3, "three").await);
    assert_eq!(read().await, "five");
    assert!(write(5, "again").await);
    assert!(write(7, "seven").await);
    assert_eq!(fence.highest(&setup, &resource).await.unwrap(), Some(7));

    // Token 9 holds the fence row; token 8 waits for it, then is refused.
    let mut holder = s.pool().get().await.unwrap();
    let tx9 = holder.transaction().await.unwrap();
    assert!(fence.check(&tx9, &resource, 9).await.unwrap());
    let waiting = tokio::spawn(write(8, "eight"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "token 8 did not wait for token 9's transaction"
    );
    tx9.commit().await.unwrap();
    assert!(!waiting.await.unwrap());
    assert_eq!(read().await, "seven");
    assert_eq!(fence.highest(&setup, &resource).await.unwrap(), Some(9));
}

/// `PostgresFence::append` inside the caller's transaction: an append
/// rolled back leaves neither its entry nor its token, and the next
/// committed append takes its number. The shared `fence_suite` covers
/// the rest of the contract (through committed transactions).
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn fenced_append_rolled_back_leaves_nothing() {
    use storage_postgres::fence::{AppendOutcome, LogEntry, PostgresFence};
    let s = connect_url(&base_url()).await;
    let fence = PostgresFence::create(&s, "suite_fences").await.unwrap();
    let resource = unique("log");
    let append = |token: u64, value: &'static [u8], commit: bool| {
        let (pool, fence, resource) = (s.pool().clone(), fence.clone(), resource.clone());
        async move {
            let mut client = pool.get().await.unwrap();
            let tx = client.transaction().await.unwrap();
            let outcome = fence.append(&tx, &resource, token, value).await.unwrap();
            if commit && matches!(outcome, AppendOutcome::Appended { .. }) {
                tx.commit().await.unwrap();
            }
            outcome
        }
    };
    assert_eq!(
        append(3, b"three", true).await,
        AppendOutcome::Appended { seq: 1 }
    );
    // Rolled back: neither the entry nor the token stays.
    assert_eq!(
        append(9, b"rolled back", false).await,
        AppendOutcome::Appended { seq: 2 }
    );
    assert_eq!(
        append(5, b"five", true).await,
        AppendOutcome::Appended { seq: 2 }
    );
    assert_eq!(
        append(4, b"stale", true).await,
        AppendOutcome::Rejected { highest: 5 }
    );
    let client = s.pool().get().await.unwrap();
    let entry = |seq, token, value: &[u8]| LogEntry {
        seq,
        token,
        value: value.to_vec(),
    };
    assert_eq!(
        fence.log(&client, &resource).await.unwrap(),
        vec![entry(1, 3, b"three"), entry(2, 5, b"five")]
    );
}

/// A compare-and-delete by another storage (another process, in
/// production) wakes a watcher; a swap does not, and a record without
/// expiry is watched without a timer: nothing but the delete wakes it.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn watch_wakes_on_a_delete_by_another_storage() {
    let watcher = connect_url(&base_url()).await;
    let deleter = connect_url(&base_url()).await;
    network::watch_wakes_on_a_delete_by_another_connection(
        &watcher,
        &deleter,
        &key("watch-other"),
        Duration::from_millis(500),
    )
    .await;
}

/// Compare-and-delete notifies the table's channel with the key, once,
/// and only when it deleted.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn compare_and_delete_notifies_the_key() {
    let table = unique("suite_notify");
    let s = connect_url(&with_query(&format!("table={table}"))).await;
    assert!(s.watch_channel().starts_with("ttl_storage_"));
    // A plain LISTEN connection, its notifications forwarded here.
    let (client, mut connection) = tokio_postgres::connect(&base_url(), tokio_postgres::NoTls)
        .await
        .unwrap();
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Some(Ok(message)) = std::future::poll_fn(|cx| connection.poll_message(cx)).await {
            if let tokio_postgres::AsyncMessage::Notification(n) = message {
                let _ = tx.send((n.channel().to_string(), n.payload().to_string()));
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN {}", s.watch_channel()))
        .await
        .unwrap();
    let k = key("notify");
    assert!(s.insert_if_not_exists(&k, b"a", ttl(30)).await.unwrap());
    assert!(!s.compare_and_delete(&k, b"other").await.unwrap());
    assert!(s.compare_and_delete(&k, b"a").await.unwrap());
    assert!(!s.compare_and_delete(&k, b"a").await.unwrap());
    let (channel, payload) = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
        .await
        .expect("no notification")
        .unwrap();
    assert_eq!(channel, s.watch_channel());
    assert_eq!(payload, k.as_str());
    // Only the delete that deleted notified (its transaction committed).
    assert!(
        tokio::time::timeout(Duration::from_millis(300), notifications.recv())
            .await
            .is_err()
    );
}

/// When the listener's connection dies, a pending watch completes (its
/// waiter re-checks and polls) and new watches answer `WatchUnsupported`
/// until it listens again: a waiter never hangs on a dead listener.
#[tokio::test]
#[ignore = "needs PostgreSQL: run `cargo xtask test-drivers --engine postgres`"]
async fn dead_listener_wakes_and_reports_unsupported() {
    let direct = connect_url(&base_url()).await;
    let proxy = elections_testsuite::proxy::Proxy::start(server_addr())
        .await
        .unwrap();
    let url = url_with(|u| {
        u.set_host(Some(&proxy.addr.ip().to_string())).unwrap();
        u.set_port(Some(proxy.addr.port())).unwrap();
        u.set_query(Some("pool_size=1&connect_timeout=5s"));
    });
    let s = connect_url(&url).await;
    let k = key("dead-listener");
    assert!(
        direct
            .insert_if_not_exists(&k, b"a", Ttl::NEVER)
            .await
            .unwrap()
    );
    let mut watch = s.watch(&k).unwrap();
    // Armed and waiting (its expiry read done): only the listener's
    // failure can wake it now.
    assert!(
        tokio::time::timeout(Duration::from_millis(500), &mut watch)
            .await
            .is_err()
    );
    proxy.shut_down();
    assert!(
        network::completes_within(watch, Duration::from_secs(10)).await,
        "a watch on a dead listener did not complete"
    );
    assert!(
        s.watch(&k).is_err(),
        "watch still supported without a listener"
    );
    assert!(direct.compare_and_delete(&k, b"a").await.unwrap());
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
