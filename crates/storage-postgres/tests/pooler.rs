//! storage-postgres behind PgBouncer: what `cargo xtask test-drivers
//! --engine postgres-pgbouncer` checks besides the whole suite, which runs
//! through PgBouncer in session mode.
//!
//! - transaction and statement mode share server sessions between client
//!   connections: `connect` refuses them, naming the mode it needs, before
//!   it sends anything that leaves state behind (no table is created, no
//!   `LISTEN` is left on a shared session);
//! - a PgBouncer that refuses the startup parameter `options` (its
//!   default) is a permanent error that names the setting to add.
//!
//! The variables are set by the xtask row (`POSTGRES_PGBOUNCER_*_URL`,
//! `POSTGRES_DIRECT_URL`).

// Test code: a panic with a clear message is how a case fails.
#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::time::Duration;

use storage_postgres::PostgresStorage;
use ttl_storage::ErrorKind;

fn var(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| {
        panic!("{name} is not set: run `cargo xtask test-drivers --engine postgres-pgbouncer`")
    })
}

fn unique_table(name: &str) -> String {
    elections_testsuite::network::unique(name, "_")
}

/// A client connected to the server directly (not through the pooler).
async fn direct_client() -> tokio_postgres::Client {
    let (client, connection) =
        tokio_postgres::connect(&var("POSTGRES_DIRECT_URL"), tokio_postgres::NoTls)
            .await
            .unwrap();
    tokio::spawn(connection);
    client
}

/// `url` with `table=<table>` added.
fn with_table(url: &str, table: &str) -> String {
    let separator = if url.contains('?') { '&' } else { '?' };
    format!("{url}{separator}table={table}")
}

/// Whether `table` exists, asked of the server directly.
async fn table_exists(table: &str) -> bool {
    let row = direct_client()
        .await
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .unwrap();
    row.get(0)
}

/// The channel the driver listens on for `table` (documented:
/// `ttl_storage_<FNV-1a of the qualified table name, 16 hex digits>`).
fn channel(table: &str) -> String {
    let mut hash: u64 = 0xcbf2_9ce4_8422_2325;
    for byte in format!("public.{table}").bytes() {
        hash ^= u64::from(byte);
        hash = hash.wrapping_mul(0x0100_0000_01b3);
    }
    format!("ttl_storage_{hash:016x}")
}

/// Server sessions whose last statement was `LISTEN` on `table`'s
/// channel: a listener left behind on a pooled session would show here.
async fn listening_on(table: &str) -> i64 {
    let row = direct_client()
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE query = 'LISTEN ' || $1",
            &[&channel(table)],
        )
        .await
        .unwrap();
    row.get(0)
}

async fn refused(url: &str) -> ttl_storage::StorageError {
    let table = unique_table("pooler_refused");
    let err = PostgresStorage::from_url(&with_table(url, &table))
        .await
        .expect_err("connected through a pooler that shares server sessions");
    assert!(
        !table_exists(&table).await,
        "{table} was created before the refusal"
    );
    assert_eq!(
        listening_on(&table).await,
        0,
        "a LISTEN was left on a shared session"
    );
    err
}

/// Transaction mode: refused, permanent, naming session mode, and
/// nothing was set up on the shared sessions.
#[tokio::test]
#[ignore = "needs PgBouncer: run `cargo xtask test-drivers --engine postgres-pgbouncer`"]
async fn transaction_mode_is_refused_naming_session_mode() {
    let err = refused(&var("POSTGRES_PGBOUNCER_TRANSACTION_URL")).await;
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    let text = err.to_string();
    assert!(text.contains("transaction or statement mode"), "{text}");
    assert!(text.contains("pool_mode = session"), "{text}");
    assert!(!text.contains("s3cret"), "{text}");
}

/// Statement mode: refused the same way (it refuses the probe's
/// transaction block).
#[tokio::test]
#[ignore = "needs PgBouncer: run `cargo xtask test-drivers --engine postgres-pgbouncer`"]
async fn statement_mode_is_refused_naming_session_mode() {
    let err = refused(&var("POSTGRES_PGBOUNCER_STATEMENT_URL")).await;
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    assert!(err.to_string().contains("pool_mode = session"), "{err}");
}

/// PgBouncer's default refuses the startup parameter `options`: a
/// permanent error (not a connection failure to retry) that names the
/// setting to add.
#[tokio::test]
#[ignore = "needs PgBouncer: run `cargo xtask test-drivers --engine postgres-pgbouncer`"]
async fn a_pgbouncer_refusing_startup_options_is_permanent_and_says_what_to_set() {
    let err = PostgresStorage::from_url(&var("POSTGRES_PGBOUNCER_STRICT_URL"))
        .await
        .expect_err("connected although PgBouncer refuses `options`");
    assert_eq!(err.kind(), ErrorKind::Permanent, "{err}");
    let text = err.to_string();
    assert!(
        text.contains("ignore_startup_parameters = options"),
        "{text}"
    );
    assert!(text.contains("unsupported startup parameter"), "{text}");
}

/// PgBouncer with `ignore_startup_parameters = options` drops the
/// driver's `statement_timeout`: the storage reads what the server runs
/// with, which `connect` warns about; directly it is the configured one.
#[tokio::test]
#[ignore = "needs PgBouncer: run `cargo xtask test-drivers --engine postgres-pgbouncer`"]
async fn a_dropped_statement_timeout_is_seen() {
    let url = |var: &str| format!("{}?timeout=3s", self::var(var));
    let pooled = PostgresStorage::from_url(&url("POSTGRES_PGBOUNCER_URL"))
        .await
        .unwrap();
    assert_eq!(pooled.statement_timeout().await.unwrap(), Duration::ZERO);
    let direct = PostgresStorage::from_url(&url("POSTGRES_DIRECT_URL"))
        .await
        .unwrap();
    assert_eq!(
        direct.statement_timeout().await.unwrap(),
        Duration::from_secs(3)
    );
}

/// Session mode (the URL the suite runs through) is not refused.
#[tokio::test]
#[ignore = "needs PgBouncer: run `cargo xtask test-drivers --engine postgres-pgbouncer`"]
async fn session_mode_connects() {
    use ttl_storage::{Key, Ttl, TtlStorage};
    let storage = PostgresStorage::from_url(&var("POSTGRES_PGBOUNCER_URL"))
        .await
        .unwrap();
    let key = Key::new(format!("pooler/{}", unique_table("session"))).unwrap();
    assert!(
        storage
            .insert_if_not_exists(&key, b"v", Ttl::from_secs(5).unwrap())
            .await
            .unwrap()
    );
    assert_eq!(storage.get(&key).await.unwrap().as_deref(), Some(&b"v"[..]));
}
